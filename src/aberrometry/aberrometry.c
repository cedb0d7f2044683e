/*
 * The aberrometry pipeline (aberrometry.h; seed 001, the whole system): parameters and their
 * validation, the reference centroids, the plan and its slots (frames in flight on the GPU),
 * run / run_batch, the CPU pipeline (steps 1-6) and the host-side result that both backends
 * share (sw_ab_result_fill). The GPU twin is aberrometry_cuda.cu; the model arithmetic both use
 * is ab_model.h.
 *
 * CPU pipeline, per frame (aberrometry.h steps 1-6; seed Sec. 3.1-3.3):
 *   1. sw_pupil_run with the lenslet mask;
 *   2-3. per eye the analysis circle and each lenslet's stage (ab_model.h); the design rows of
 *      every used lenslet (exact lenslet means, OpenMP over lenslets);
 *   3. dynamic mesh (seed Sec. 3.2.1, "use of a dynamic search mesh"), in mesh_stages stages:
 *      stage k searches the lenslets of stages 0 .. k of both eyes (from the reference
 *      centroids in stage 0, else from stage k - 1's prediction; the plan's search with its
 *      discarding), fits orders 1 .. of stage k to the spots kept (more where they carry more:
 *      sw_ab_stage_terms), and predicts every used lenslet's centroid, reference + D_k c_k
 *      (cblas_dgemv);
 *   4. the final search (the plan's algorithm, discarding as asked) of all used lenslets of the
 *      eyes still valid, both eyes in one run, from the last prediction; with the dynamic mesh
 *      the mesh check (spots farther than mesh_tolerance pitches from their start: SPACING);
 *   5. per eye the fit of orders 1 .. order to the kept slopes: normal equations (cblas_dsyrk,
 *      cblas_dgemv) solved by Cholesky (LAPACKE_dpotrf, dpotrs), and the residual;
 *   6. the result (sw_ab_result_fill): pupil diameter, refraction, validity.
 * An eye that fails a step (NO_PUPIL, FEW_CENTRAL, SINGULAR, FEW_SPOTS) drops out of the later
 * steps; its lenslets are not searched again (status SW_SPOT_INACTIVE in sw_aberrometry_spots).
 */
#include "aberrometry/aberrometry_internal.h"
#include "pupil/pupil_internal.h"

#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ small things */

const char *sw_ab_failure_string(sw_ab_failure f)
{
    switch (f) {
    case SW_AB_OK: return "measured";
    case SW_AB_NO_PUPIL: return "pupil not found";
    case SW_AB_FEW_SPOTS: return "fewer kept spots than unknowns";
    case SW_AB_FEW_CENTRAL: return "fewer central spots than unknowns of the preliminary fit";
    case SW_AB_SINGULAR: return "the normal matrix is not positive definite";
    }
    return "unknown failure";
}

void sw_aberrometry_params_default(sw_aberrometry_params *p, int32_t width, int32_t height,
                                   sw_pixel_type t, const sw_sh_geometry *g)
{
    if (!p)
        return;
    memset(p, 0, sizeof *p);
    p->width = width;
    p->height = height;
    p->type = t;
    if (g)
        p->geometry = *g;
    else
        sw_sh_geometry_default(&p->geometry);
    p->geometry.valid = NULL;
    p->ref_x = p->ref_y = NULL;
    p->n_eyes = 1;
    p->algorithm = SW_SEARCH_PAPYCS;
    p->order = 6;
    p->prelim_order = 3;
    p->central_fraction = 0.5;
    p->mesh_stages = 4;
    p->mesh_tolerance = 0.25;
    p->mesh_slopes_per_term = 4;
    p->mesh_raise_residual_px = 0.2;
    p->outlier_sigma = 5.0;
    p->outlier_min_px = 1.0;
    p->neighbour_window = 1.0;
    p->fit_radius_px = 0.0;
    p->magnification = 1.0;
    p->vertex_mm = 0.0;
    p->window_px = 0;
    p->min_window_px = 3;
    p->discard = 1;
    p->discard_contrast = 15.0;
    p->discard_ring_px = 0;
    p->contrast_full_scale = 0.0;
    p->min_spacing = 0.5;
    p->max_spacing = 1.5;
    p->peak_box = 13;
    p->peak_threshold = 0.0;
    sw_pupil_params_default(&p->pupil, width, height, t);
    p->streams = 2;
}

int32_t sw_aberrometry_discard_ring(const sw_aberrometry_params *p)
{
    if (!p)
        return 1;
    return p->discard_ring_px > 0 ? p->discard_ring_px
                                  : sw_search_discard_ring(p->geometry.pitch_px);
}

double sw_aberrometry_full_scale(const sw_aberrometry_params *p)
{
    if (!p)
        return 255.0;
    if (p->contrast_full_scale > 0.0)
        return p->contrast_full_scale;
    switch (p->type) {
    case SW_PIX_U16: return 65535.0;
    case SW_PIX_F32: return 1.0;
    default: return 255.0;
    }
}

/* floor(pitch_px) within [lo, SW_SEARCH_MAX_WINDOW]: the lenslet size as a search window. */
static int32_t pitch_window(double pitch_px, int32_t lo)
{
    double f = floor(pitch_px);
    if (!(f >= (double)lo))
        return lo;
    if (f > (double)SW_SEARCH_MAX_WINDOW)
        return SW_SEARCH_MAX_WINDOW;
    return (int32_t)f;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ------------------------------------------------------------------ reference centroids */

sw_status sw_aberrometry_reference(sw_context *ctx, const sw_sh_geometry *g,
                                   const sw_image *reference, double *ref_x, double *ref_y,
                                   int32_t *found)
{
    if (!ctx || !g || !reference || !ref_x || !ref_y)
        return sw_fail(ctx, SW_EINVAL,
                       "aberrometry reference: context, geometry, image or output is NULL");
    sw_status st = sw_image_check(ctx, reference);
    if (st != SW_OK)
        return st;
    if (reference->type != SW_PIX_U8 && reference->type != SW_PIX_U16 &&
        reference->type != SW_PIX_F32)
        return sw_fail(ctx, SW_EINVAL,
                       "aberrometry reference: pixel type %s is not supported (u8, u16, f32)",
                       sw_pixel_type_string(reference->type));
    if ((st = sw_sh_geometry_check(ctx, g, reference->width, reference->height)) != SW_OK)
        return st;

    const int32_t nl = g->nx * g->ny;
    sw_search_params sp;
    sw_search_params_default(&sp, reference->width, reference->height, nl);
    sp.type = reference->type;
    sp.algorithm = SW_SEARCH_PAPYCS;
    sp.nx = sp.ny = 0; /* no grid: no discarding */
    sp.discard = 0;
    sp.min_window_px = 3;
    sp.window_px = pitch_window(g->pitch_px, 3);

    double *buf = malloc((size_t)nl * 5 * sizeof(double));
    uint8_t *status = malloc((size_t)nl);
    sw_search_plan *plan = NULL;
    if (!buf || !status) {
        free(buf);
        free(status);
        return sw_fail(ctx, SW_ENOMEM, "aberrometry reference: out of memory for %d lenslets", nl);
    }
    double *sx = buf, *sy = buf + nl, *x = buf + 2 * (size_t)nl, *y = buf + 3 * (size_t)nl,
           *in = buf + 4 * (size_t)nl;
    for (int32_t l = 0; l < nl; l++)
        sw_sh_reference(g, l % g->nx, l / g->nx, &sx[l], &sy[l]);
    st = sw_search_create(ctx, &sp, &plan);
    if (st == SW_OK)
        st = sw_search_run(plan, reference, sx, sy, NULL, SW_MEM_HOST, x, y, in, status);
    sw_search_destroy(plan);
    if (st != SW_OK) {
        free(buf);
        free(status);
        return st;
    }
    /* the median intensity of the spots found (sx is free again) */
    int32_t n = 0;
    for (int32_t l = 0; l < nl; l++)
        if (status[l] == SW_SPOT_OK)
            sx[n++] = in[l];
    double median = 0.0;
    if (n > 0) {
        qsort(sx, (size_t)n, sizeof(double), cmp_double);
        median = n % 2 ? sx[n / 2] : 0.5 * (sx[n / 2 - 1] + sx[n / 2]);
    }
    int32_t count = 0;
    for (int32_t l = 0; l < nl; l++) {
        if (status[l] == SW_SPOT_OK && in[l] >= 0.01 * median) {
            ref_x[l] = x[l];
            ref_y[l] = y[l];
            count++;
        } else {
            ref_x[l] = NAN;
            ref_y[l] = NAN;
        }
    }
    if (found)
        *found = count;
    free(buf);
    free(status);
    return SW_OK;
}

/* ------------------------------------------------------------------ validation */

static sw_status check_params(sw_context *ctx, const sw_aberrometry_params *p)
{
    if (p->width < SW_PUPIL_MIN_SIZE || p->height < SW_PUPIL_MIN_SIZE ||
        p->width > SW_IMAGE_MAX_DIM || p->height > SW_IMAGE_MAX_DIM)
        return sw_fail(ctx, SW_EINVAL,
                       "aberrometry: frame size %d x %d is not valid (width and height must be "
                       "%d .. %d)",
                       p->width, p->height, SW_PUPIL_MIN_SIZE, SW_IMAGE_MAX_DIM);
    if ((int64_t)p->width * p->height > SW_IMAGE_MAX_PIXELS)
        return sw_fail(ctx, SW_EINVAL, "aberrometry: frame size %d x %d has too many pixels",
                       p->width, p->height);
    if (p->type != SW_PIX_U8 && p->type != SW_PIX_U16 && p->type != SW_PIX_F32)
        return sw_fail(ctx, SW_EINVAL, "aberrometry: type %s is not supported (u8, u16, f32)",
                       sw_pixel_type_string(p->type));
    sw_status st = sw_sh_geometry_check(ctx, &p->geometry, p->width, p->height);
    if (st != SW_OK)
        return st; /* the message names the field or lenslet */
    if (p->n_eyes != 1 && p->n_eyes != 2)
        return sw_fail(ctx, SW_EINVAL, "aberrometry: n_eyes %d must be 1 or 2", p->n_eyes);
    if (p->algorithm != SW_SEARCH_PAPYCS && p->algorithm != SW_SEARCH_COM &&
        p->algorithm != SW_SEARCH_REICHENBACH)
        return sw_fail(ctx, SW_EINVAL, "aberrometry: unknown algorithm %d", (int)p->algorithm);
    if (p->order < 1 || p->order > SW_AB_MAX_ORDER)
        return sw_fail(ctx, SW_EINVAL, "aberrometry: order %d must be 1 .. %d", p->order,
                       SW_AB_MAX_ORDER);
    if (p->prelim_order < 0 || p->prelim_order > p->order)
        return sw_fail(ctx, SW_EINVAL, "aberrometry: prelim_order %d must be 0 .. order (%d)",
                       p->prelim_order, p->order);
    if (!(p->central_fraction > 0.0 && p->central_fraction <= 1.0))
        return sw_fail(ctx, SW_EINVAL, "aberrometry: central_fraction %g must be in (0, 1]",
                       p->central_fraction);
    if (p->mesh_stages < 1 || p->mesh_stages > SW_AB_MAX_STAGES)
        return sw_fail(ctx, SW_EINVAL, "aberrometry: mesh_stages %d must be 1 .. %d",
                       p->mesh_stages, SW_AB_MAX_STAGES);
    if (!(isfinite(p->mesh_tolerance) && p->mesh_tolerance >= 0.0))
        return sw_fail(ctx, SW_EINVAL,
                       "aberrometry: mesh_tolerance %g must be finite and >= 0 (0: no check)",
                       p->mesh_tolerance);
    if (p->mesh_slopes_per_term < 0 || p->mesh_slopes_per_term > 1000)
        return sw_fail(ctx, SW_EINVAL,
                       "aberrometry: mesh_slopes_per_term %d must be 0 .. 1000 (0: the stages fit "
                       "their scheduled orders only)",
                       p->mesh_slopes_per_term);
    if (!(p->mesh_raise_residual_px > 0.0))
        return sw_fail(ctx, SW_EINVAL,
                       "aberrometry: mesh_raise_residual_px %g must be > 0 (+Inf: no check)",
                       p->mesh_raise_residual_px);
    if (!(isfinite(p->outlier_sigma) && p->outlier_sigma >= 0.0))
        return sw_fail(ctx, SW_EINVAL,
                       "aberrometry: outlier_sigma %g must be finite and >= 0 (0: no rejection)",
                       p->outlier_sigma);
    if (!(isfinite(p->outlier_min_px) && p->outlier_min_px >= 0.0))
        return sw_fail(ctx, SW_EINVAL, "aberrometry: outlier_min_px %g must be finite and >= 0",
                       p->outlier_min_px);
    if (!(isfinite(p->neighbour_window) && p->neighbour_window >= 0.0))
        return sw_fail(ctx, SW_EINVAL,
                       "aberrometry: neighbour_window %g must be finite and >= 0 (0: windows of "
                       "window_px)",
                       p->neighbour_window);
    if (!(isfinite(p->fit_radius_px) && p->fit_radius_px >= 0.0))
        return sw_fail(ctx, SW_EINVAL,
                       "aberrometry: fit_radius_px %g must be finite and >= 0 (0: the pupil's "
                       "major semi-axis)",
                       p->fit_radius_px);
    if (!(isfinite(p->magnification) && p->magnification > 0.0))
        return sw_fail(ctx, SW_EINVAL, "aberrometry: magnification %g must be finite and > 0",
                       p->magnification);
    if (!(isfinite(p->vertex_mm) && p->vertex_mm >= 0.0))
        return sw_fail(ctx, SW_EINVAL, "aberrometry: vertex_mm %g must be finite and >= 0",
                       p->vertex_mm);
    if (p->min_window_px < 1 || p->min_window_px > SW_SEARCH_MAX_WINDOW)
        return sw_fail(ctx, SW_EINVAL, "aberrometry: min_window_px %d must be 1 .. %d",
                       p->min_window_px, SW_SEARCH_MAX_WINDOW);
    if (p->window_px != 0 &&
        (p->window_px < p->min_window_px || p->window_px > SW_SEARCH_MAX_WINDOW))
        return sw_fail(ctx, SW_EINVAL,
                       "aberrometry: window_px %d must be min_window_px (%d) .. %d, or 0 (the "
                       "lenslet pitch rounded down)",
                       p->window_px, p->min_window_px, SW_SEARCH_MAX_WINDOW);
    if (!isfinite(p->discard_contrast))
        return sw_fail(ctx, SW_EINVAL, "aberrometry: discard_contrast %g must be finite",
                       p->discard_contrast);
    if (p->discard_ring_px < 0 || p->discard_ring_px > SW_SEARCH_MAX_WINDOW / 2)
        return sw_fail(ctx, SW_EINVAL,
                       "aberrometry: discard_ring_px %d must be 0 .. %d (0: from the pitch)",
                       p->discard_ring_px, SW_SEARCH_MAX_WINDOW / 2);
    if (!(isfinite(p->contrast_full_scale) && p->contrast_full_scale >= 0.0))
        return sw_fail(ctx, SW_EINVAL,
                       "aberrometry: contrast_full_scale %g must be finite and >= 0 (0: by the "
                       "pixel type)",
                       p->contrast_full_scale);
    if (!(isfinite(p->min_spacing) && isfinite(p->max_spacing) && p->min_spacing >= 0.0 &&
          p->min_spacing < p->max_spacing))
        return sw_fail(ctx, SW_EINVAL,
                       "aberrometry: min_spacing %g and max_spacing %g must be finite with "
                       "0 <= min_spacing < max_spacing",
                       p->min_spacing, p->max_spacing);
    if (p->streams < 1 || p->streams > SW_AB_MAX_STREAMS)
        return sw_fail(ctx, SW_EINVAL, "aberrometry: streams %d must be 1 .. %d", p->streams,
                       SW_AB_MAX_STREAMS);
    if ((p->ref_x == NULL) != (p->ref_y == NULL))
        return sw_fail(ctx, SW_EINVAL,
                       "aberrometry: ref_x and ref_y must be given together (or both NULL)");
    if (p->ref_x) {
        const int32_t nl = p->geometry.nx * p->geometry.ny;
        int32_t spots = 0;
        for (int32_t l = 0; l < nl; l++) {
            double x = p->ref_x[l], y = p->ref_y[l];
            if (isinf(x) || isinf(y))
                return sw_fail(ctx, SW_EINVAL,
                               "aberrometry: reference centroid %d (ix %d, iy %d) is infinite "
                               "(NaN marks a lenslet without a spot)",
                               l, l % p->geometry.nx, l / p->geometry.nx);
            if (isfinite(x) && isfinite(y))
                spots++;
        }
        if (spots == 0)
            return sw_fail(ctx, SW_EINVAL,
                           "aberrometry: the reference (ref_x, ref_y) has no spot: every entry "
                           "is NaN");
    }
    return SW_OK;
}

/* ------------------------------------------------------------------ the plan */

/* The CPU pipeline's work arrays (nl lenslets, m = J - 1 columns). */
struct sw_ab_cpu {
    uint8_t *mask;    /* nl: the tracker's lenslet mask                                   */
    uint8_t *stage;   /* nl: SW_AB_UNUSED or the first search that takes it (ab_model.h) */
    uint8_t *active;  /* nl: the search's active flags                                    */
    uint8_t *status;  /* nl: the last search's status                                     */
    uint8_t *eye;     /* nl: 0, 1, 2 (used lenslets of an eye)                            */
    double *x, *y;    /* nl: the last search's centroids                                  */
    double *sx, *sy;  /* nl: the final search's start (NaN where not searched)            */
    int32_t *lens;    /* nu: the used lenslets, eye 0's then eye 1's, each in index order */
    int32_t first[3]; /* eye e's rows: [first[e], first[e + 1])                           */
    double *Dx, *Dy;  /* nu x m: their design rows (row-major, leading dimension m)       */
    double *A;        /* 2 nu x m: a fit's rows                                           */
    double *s;        /* 2 nu: its slopes, then its residuals                             */
    double *pred;     /* nu: D_p c_p                                                      */
    int32_t *sel;     /* nu: a fit's rows (indices into lens)                             */
    double N[SW_AB_MAX_TERMS * SW_AB_MAX_TERMS], b[SW_AB_MAX_TERMS];
    int have_last;
};

static void cpu_free(struct sw_ab_cpu *w)
{
    if (!w)
        return;
    free(w->mask);
    free(w->stage);
    free(w->active);
    free(w->status);
    free(w->eye);
    free(w->x);
    free(w->y);
    free(w->sx);
    free(w->sy);
    free(w->lens);
    free(w->Dx);
    free(w->Dy);
    free(w->A);
    free(w->s);
    free(w->pred);
    free(w->sel);
    free(w);
}

static struct sw_ab_cpu *cpu_alloc(int32_t nl, int32_t J)
{
    struct sw_ab_cpu *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    size_t n = (size_t)nl, m = (size_t)(J - 1);
    w->mask = calloc(n, 1);
    w->stage = calloc(n, 1);
    w->active = calloc(n, 1);
    w->status = calloc(n, 1);
    w->eye = calloc(n, 1);
    w->x = malloc(n * sizeof(double));
    w->y = malloc(n * sizeof(double));
    w->sx = malloc(n * sizeof(double));
    w->sy = malloc(n * sizeof(double));
    w->lens = malloc(n * sizeof(int32_t));
    w->Dx = malloc(n * m * sizeof(double));
    w->Dy = malloc(n * m * sizeof(double));
    w->A = malloc(2 * n * m * sizeof(double));
    w->s = malloc(2 * n * sizeof(double));
    w->pred = malloc(n * sizeof(double));
    w->sel = malloc(n * sizeof(int32_t));
    if (!w->mask || !w->stage || !w->active || !w->status || !w->eye || !w->x || !w->y || !w->sx ||
        !w->sy || !w->lens || !w->Dx || !w->Dy || !w->A || !w->s || !w->pred || !w->sel) {
        cpu_free(w);
        return NULL;
    }
    return w;
}

void sw_aberrometry_destroy(sw_aberrometry_plan *plan)
{
    if (!plan)
        return;
    for (int s = 0; s < SW_AB_MAX_STREAMS; s++) {
        sw_ab_slot *sl = &plan->slot[s];
#ifdef SW_HAVE_CUDA
        if (sl->gpu)
            sw_ab_gpu_free(plan, s);
#endif
        sw_search_destroy(sl->search);
        sw_pupil_destroy(sl->pupil);
        if (sl->own_ctx)
            sw_context_destroy(sl->ctx);
        memset(sl, 0, sizeof *sl);
    }
    cpu_free(plan->cpu);
    free(plan->ref_x);
    free(plan->ref_y);
    free(plan);
}

/* The search parameters: the plan's algorithm on the lenslet grid, discarding as asked. With the
 * dynamic mesh (PAPYCS) the same plan runs every stage of step 3 and the final search. */
static void search_params(const sw_aberrometry_plan *plan, sw_search_params *sp)
{
    const sw_aberrometry_params *p = &plan->p;
    sw_search_params_default(sp, p->width, p->height, plan->nl);
    sp->type = p->type;
    sp->algorithm = p->algorithm;
    sp->nx = p->geometry.nx;
    sp->ny = p->geometry.ny;
    sp->pitch_px = p->geometry.pitch_px;
    sp->window_px = p->window_px;
    sp->min_window_px = p->min_window_px;
    sp->peak_box = p->peak_box;
    sp->peak_threshold = p->peak_threshold;
    /* with the dynamic mesh the starts are predictions: no first window reaches past the
     * midpoint to a neighbour's (search.h); the static mesh's reference starts lie a pitch
     * apart, where it changes nothing */
    sp->neighbour_window = plan->dynamic ? p->neighbour_window : 0.0;
    sp->discard = p->discard ? 1 : 0;
    sp->discard_contrast = p->discard_contrast * sw_aberrometry_full_scale(p) / 255.0;
    sp->discard_ring_px = sw_aberrometry_discard_ring(p);
    sp->min_spacing = p->min_spacing;
    sp->max_spacing = p->max_spacing;
}

/* A slot: its context (slot 0: the plan's; others: a new one on the same device, own stream),
 * pupil tracker and search plans, and (CUDA) its device state. */
static sw_status slot_create(sw_aberrometry_plan *plan, int s)
{
    sw_ab_slot *sl = &plan->slot[s];
    sw_status st;
    if (s == 0) {
        sl->ctx = plan->ctx;
    } else {
        sw_context_params cp;
        sw_context_params_default(&cp);
        cp.backend = SW_BACKEND_CUDA;
        cp.device = plan->ctx->device;
        cp.threads = plan->ctx->threads;
        cp.log = plan->ctx->log;
        cp.log_user = plan->ctx->log_user;
        cp.log_level = plan->ctx->log_level;
        if ((st = sw_context_create(&cp, &sl->ctx)) != SW_OK)
            return sw_fail(plan->ctx, st, "aberrometry: stream %d: %s", s, sw_context_error(NULL));
        sl->own_ctx = 1;
    }
    if ((st = sw_pupil_create(sl->ctx, &plan->p.pupil, &sl->pupil)) != SW_OK)
        goto fail;
    sw_search_params sp;
    search_params(plan, &sp);
    if ((st = sw_search_create(sl->ctx, &sp, &sl->search)) != SW_OK)
        goto fail;
#ifdef SW_HAVE_CUDA
    if (plan->cuda && (st = sw_ab_gpu_init(plan, s)) != SW_OK)
        goto fail;
#endif
    return SW_OK;
fail:
    if (sl->ctx != plan->ctx)
        sw_fail(plan->ctx, st, "%s", sw_context_error(sl->ctx));
    return st;
}

/* The dynamic mesh's stages (aberrometry.h step 3): stage k's circle radius frac[k] R_px and
 * its orders 1 .. min(prelim_order + k, order). */
static void stage_schedule(sw_aberrometry_plan *plan)
{
    const sw_aberrometry_params *p = &plan->p;
    const int32_t S = plan->n_stages;
    for (int32_t k = 0; k < S; k++) {
        plan->frac[k] = p->central_fraction + (1.0 - p->central_fraction) * (double)k / (double)S;
        int32_t o = p->prelim_order + k;
        plan->Js[k] = sw_zernike_count(o < p->order ? o : p->order);
    }
    plan->mesh_tol_px = plan->dynamic ? p->mesh_tolerance * p->geometry.pitch_px : 0.0;
}

sw_status sw_aberrometry_create(sw_context *ctx, const sw_aberrometry_params *p,
                                sw_aberrometry_plan **out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "aberrometry: out is NULL");
    *out = NULL;
    if (!ctx || !p)
        return sw_fail(ctx, SW_EINVAL, "aberrometry: context or parameters are NULL");
    sw_status st = check_params(ctx, p);
    if (st != SW_OK)
        return st;
#ifndef SW_HAVE_CUDA
    if (sw_context_backend(ctx) == SW_BACKEND_CUDA)
        return sw_fail(ctx, SW_EINTERNAL, "aberrometry: CUDA context in a build without CUDA");
#endif

    sw_aberrometry_plan *plan = calloc(1, sizeof *plan);
    if (!plan)
        return sw_fail(ctx, SW_ENOMEM, "aberrometry: out of memory");
    plan->ctx = ctx;
    plan->p = *p;
    plan->p.geometry.valid = NULL; /* the pupils choose the lenslets */
    plan->nl = p->geometry.nx * p->geometry.ny;
    plan->J = sw_zernike_count(p->order);
    /* The seed's CoM and Reichenbach work from the static mesh (Sec. 3.2.2-3.2.3): the dynamic
     * mesh is PAPYCS's (Sec. 3.2.1). */
    plan->dynamic = p->prelim_order > 0 && p->algorithm == SW_SEARCH_PAPYCS;
    plan->Jp = plan->dynamic ? sw_zernike_count(p->prelim_order) : 0;
    plan->n_stages = plan->dynamic ? p->mesh_stages : 0;
    stage_schedule(plan);
    plan->cuda = sw_context_backend(ctx) == SW_BACKEND_CUDA;
    plan->n_slots = plan->cuda ? p->streams : 1;
    plan->last_slot = -1;
    if (plan->p.window_px == 0)
        plan->p.window_px = pitch_window(p->geometry.pitch_px, p->min_window_px);

    /* the reference centroids (a copy; NULL: the geometry's reference positions) */
    plan->ref_x = malloc((size_t)plan->nl * sizeof(double));
    plan->ref_y = malloc((size_t)plan->nl * sizeof(double));
    if (!plan->ref_x || !plan->ref_y) {
        sw_aberrometry_destroy(plan);
        return sw_fail(ctx, SW_ENOMEM, "aberrometry: out of memory for %d lenslets", plan->nl);
    }
    for (int32_t l = 0; l < plan->nl; l++) {
        if (p->ref_x) {
            plan->ref_x[l] = p->ref_x[l];
            plan->ref_y[l] = p->ref_y[l];
        } else {
            sw_sh_reference(&plan->p.geometry, l % p->geometry.nx, l / p->geometry.nx,
                            &plan->ref_x[l], &plan->ref_y[l]);
        }
    }
    plan->p.ref_x = plan->ref_x;
    plan->p.ref_y = plan->ref_y;

    /* the tracker's frame, eyes and grid come from the fields above */
    plan->p.pupil.width = p->width;
    plan->p.pupil.height = p->height;
    plan->p.pupil.type = p->type;
    plan->p.pupil.n_pupils = p->n_eyes;
    plan->p.pupil.geometry = &plan->p.geometry;

    if (!plan->cuda) {
        plan->cpu = cpu_alloc(plan->nl, plan->J);
        if (!plan->cpu) {
            sw_aberrometry_destroy(plan);
            return sw_fail(ctx, SW_ENOMEM, "aberrometry: out of memory for %d lenslets", plan->nl);
        }
    }
    for (int s = 0; s < plan->n_slots; s++) {
        if ((st = slot_create(plan, s)) != SW_OK) {
            sw_aberrometry_destroy(plan);
            return st;
        }
    }
    *out = plan;
    return SW_OK;
}

/* ------------------------------------------------------------------ the result (both backends) */

sw_status sw_ab_result_fill(sw_aberrometry_plan *plan, const sw_pupil_result *pr,
                            const sw_ab_raw *raw, sw_aberrometry_result *out)
{
    const sw_aberrometry_params *p = &plan->p;
    const int32_t J = plan->J, Jp = plan->Jp;
    memset(out, 0, sizeof *out);
    out->n_eyes = p->n_eyes;
    out->scale = pr->scale;
    out->split_x = (double)pr->split_x;
    for (int e = 0; e < p->n_eyes; e++) {
        sw_aberrometry_eye *eye = &out->eye[e];
        const sw_ab_raw_eye *r = &raw->eye[e];
        eye->pupil = pr->pupil[e];
        eye->terms = J;
        sw_ab_failure f = pr->pupil[e].valid ? (sw_ab_failure)r->failure : SW_AB_NO_PUPIL;
        if (f == SW_AB_NO_PUPIL) {
            eye->cx_px = eye->cy_px = eye->radius_px = eye->pupil_mm = NAN;
        } else {
            eye->cx_px = r->cx;
            eye->cy_px = r->cy;
            eye->radius_px = r->radius;
            /* step 6: the analysis circle's diameter at the eye */
            eye->pupil_mm = 2.0 * r->radius * p->geometry.pixel_um / (1000.0 * p->magnification);
            eye->lenslets = r->lenslets;
            eye->central = r->central;
            eye->found = r->found;
            eye->kept = r->kept;
            for (int k = 0; k < 3; k++)
                eye->discarded[k] = r->discarded[k];
            eye->outliers = r->outliers;
        }
        if (f == SW_AB_OK) {
            for (int32_t j = 0; j < J; j++)
                if (!isfinite(r->coef[j]))
                    f = SW_AB_SINGULAR; /* a solve that produced no number */
        }
        for (int32_t j = 0; j < Jp; j++)
            eye->prelim_um[j] = f != SW_AB_NO_PUPIL && r->prelim_ok ? r->prelim[j] : NAN;
        if (Jp > 0 && f != SW_AB_NO_PUPIL && r->prelim_ok)
            eye->prelim_um[0] = 0.0;
        eye->failure = f;
        eye->valid = f == SW_AB_OK;
        if (!eye->valid) {
            for (int32_t j = 0; j < J; j++)
                eye->coef_um[j] = NAN;
            eye->residual_px = NAN;
            eye->rx.M = eye->rx.J0 = eye->rx.J45 = NAN;
            eye->rx.sphere_d = eye->rx.cyl_d = eye->rx.axis_deg = NAN;
            continue;
        }
        for (int32_t j = 0; j < J; j++)
            eye->coef_um[j] = r->coef[j];
        eye->coef_um[0] = 0.0; /* piston: invisible to slopes */
        eye->residual_px = r->residual;
        /* the terms beyond J are 0, so order 1 gets a second order of zeros */
        sw_status st = sw_zernike_refraction(plan->ctx, eye->coef_um, J < 6 ? 6 : J, eye->pupil_mm,
                                             p->higher_order_rx ? 1 : 0, p->vertex_mm, &eye->rx);
        if (st != SW_OK)
            return st;
    }
    return SW_OK;
}

/* ------------------------------------------------------------------ the CPU pipeline */

/*
 * Step 5's least squares over the lenslet rows sel[0 .. n) (indices into w->lens) with the terms
 * j = 1 .. Jf - 1 (the first Jf - 1 columns of D): the slopes s = centroid - reference (pixels,
 * x then y), the normal equations (D^T D) c = D^T s by Cholesky. coef[0] = 0, coef[j] = c_j.
 * Returns 0, or 1 when D^T D is not positive definite.
 */
static int cpu_fit(const sw_aberrometry_plan *plan, struct sw_ab_cpu *w, int32_t n, int32_t Jf,
                   double *coef, double *residual)
{
    const int32_t m = Jf - 1, ld = plan->J - 1;
    double *A = w->A, *s = w->s;
    for (int32_t k = 0; k < n; k++) {
        int32_t r = w->sel[k], l = w->lens[r];
        memcpy(A + (size_t)k * m, w->Dx + (size_t)r * ld, (size_t)m * sizeof(double));
        memcpy(A + (size_t)(n + k) * m, w->Dy + (size_t)r * ld, (size_t)m * sizeof(double));
        s[k] = w->x[l] - plan->ref_x[l];
        s[n + k] = w->y[l] - plan->ref_y[l];
    }
    cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, m, 2 * n, 1.0, A, m, 0.0, w->N, m);
    cblas_dgemv(CblasRowMajor, CblasTrans, 2 * n, m, 1.0, A, m, s, 1, 0.0, w->b, 1);
    if (LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'U', m, w->N, m) != 0)
        return 1;
    if (LAPACKE_dpotrs(LAPACK_ROW_MAJOR, 'U', m, 1, w->N, m, w->b, 1) != 0)
        return 1;
    coef[0] = 0.0;
    for (int32_t j = 1; j < Jf; j++)
        coef[j] = w->b[j - 1];
    /* residual: s <- D c - s, its RMS over the 2 n slopes */
    cblas_dgemv(CblasRowMajor, CblasNoTrans, 2 * n, m, 1.0, A, m, w->b, 1, -1.0, s, 1);
    double ss = 0.0;
    for (int32_t k = 0; k < 2 * n; k++)
        ss += s[k] * s[k];
    *residual = sqrt(ss / (2.0 * n));
    return 0;
}

static sw_status cpu_frame(sw_aberrometry_plan *plan, const sw_image *frame, sw_pupil_result *pr,
                           sw_ab_raw *raw)
{
    const sw_aberrometry_params *p = &plan->p;
    const sw_sh_geometry *g = &p->geometry;
    struct sw_ab_cpu *w = plan->cpu;
    sw_ab_slot *sl = &plan->slot[0];
    const int32_t nl = plan->nl, nx = g->nx, J = plan->J, ld = J - 1;
    memset(raw, 0, sizeof *raw);
    w->have_last = 0;

    /* step 1: the pupils and the lenslet mask */
    sw_status st = sw_pupil_run(sl->pupil, frame, pr, w->mask);
    if (st != SW_OK)
        return st;

    /* step 2: the analysis circles */
    for (int e = 0; e < p->n_eyes; e++) {
        sw_ab_raw_eye *r = &raw->eye[e];
        if (!pr->pupil[e].valid)
            r->failure = SW_AB_NO_PUPIL;
        else
            sw_ab_circle(&pr->pupil[e], p->fit_radius_px, &r->cx, &r->cy, &r->radius);
    }
    /* steps 1-3: the lenslets each eye uses, and the stage that first searches each */
    int32_t nu = 0;
    for (int e = 0; e < p->n_eyes; e++) {
        sw_ab_raw_eye *r = &raw->eye[e];
        w->first[e] = nu;
        for (int32_t l = 0; l < nl; l++) {
            if (e == 0) {
                w->stage[l] = SW_AB_UNUSED;
                w->eye[l] = 0;
            }
            if (r->failure != SW_AB_OK || w->mask[l] != (uint8_t)(e + 1))
                continue;
            int k =
                sw_ab_lenslet_stage(g, l % nx, l / nx, w->mask[l], plan->ref_x[l], plan->ref_y[l],
                                    r->cx, r->cy, r->radius, plan->frac, plan->n_stages);
            if (k == SW_AB_UNUSED)
                continue;
            w->stage[l] = (uint8_t)k;
            w->eye[l] = (uint8_t)(e + 1);
            w->lens[nu++] = l;
            r->lenslets++;
            if (k == 0 && plan->dynamic)
                r->central++;
        }
    }
    w->first[p->n_eyes] = nu;
    if (p->n_eyes == 1)
        w->first[2] = nu;

    /* step 5's model: the design rows of every used lenslet in its eye's circle */
    {
        const int32_t *lens = w->lens;
        double *Dx = w->Dx, *Dy = w->Dy;
        const int32_t f1 = w->first[1];
        const double c0x = raw->eye[0].cx, c0y = raw->eye[0].cy, r0 = raw->eye[0].radius;
        const double c1x = raw->eye[1].cx, c1y = raw->eye[1].cy, r1 = raw->eye[1].radius;
#ifdef SW_HAVE_OPENMP
#pragma omp parallel for schedule(static) num_threads(sw_context_threads(plan->ctx))
#endif
        for (int32_t k = 0; k < nu; k++) {
            int32_t l = lens[k];
            int second = k >= f1;
            sw_ab_design_rows(J, g, l % nx, l / nx, second ? c1x : c0x, second ? c1y : c0y,
                              second ? r1 : r0, Dx + (size_t)k * ld, Dy + (size_t)k * ld);
        }
    }

    /* step 3: the dynamic mesh. The starts: the reference centroids of the used lenslets, NaN
     * elsewhere (as on the GPU: the neighbour window of the search reads the starts of lenslets
     * it does not search) */
    for (int32_t l = 0; l < nl; l++) {
        w->sx[l] = w->eye[l] ? plan->ref_x[l] : NAN;
        w->sy[l] = w->eye[l] ? plan->ref_y[l] : NAN;
    }
    /* stage k = 0 .. S - 1 searches the lenslets of stages 0 .. k (from the reference centroids
     * when k = 0, else from the prediction of stage k - 1), fits orders 1 .. of stage k to the
     * spots found, and predicts every used lenslet's centroid from that fit; the lenslets of an
     * eye that failed are neither searched nor started (NaN) */
    for (int32_t k = 0; k < plan->n_stages; k++) {
        const int32_t Jk = plan->Js[k];
        for (int32_t l = 0; l < nl; l++) {
            int e = w->eye[l] - 1;
            int ok = e >= 0 && raw->eye[e].failure == SW_AB_OK;
            w->active[l] = ok && w->stage[l] <= k;
            if (!ok)
                w->sx[l] = w->sy[l] = NAN;
        }
        st = sw_search_run(sl->search, frame, w->sx, w->sy, w->active, SW_MEM_HOST, w->x, w->y,
                           NULL, w->status);
        if (st != SW_OK)
            return st;
        for (int e = 0; e < p->n_eyes; e++) {
            sw_ab_raw_eye *r = &raw->eye[e];
            if (r->failure != SW_AB_OK)
                continue;
            /* 3b: the preliminary fit to the slopes found */
            int32_t n = 0;
            for (int32_t q = w->first[e]; q < w->first[e + 1]; q++) {
                int32_t l = w->lens[q];
                if (w->stage[l] <= k && w->status[l] == SW_SPOT_OK)
                    w->sel[n++] = q;
            }
            if (2 * n < Jk - 1) {
                r->failure = SW_AB_FEW_CENTRAL;
                continue;
            }
            /* more orders where the spots kept carry them */
            const int32_t Jf = sw_ab_stage_terms(Jk, p->order, n, p->mesh_slopes_per_term);
            double c[SW_AB_MAX_TERMS], res;
            if (cpu_fit(plan, w, n, Jf, c, &res) != 0) {
                r->failure = SW_AB_SINGULAR;
                continue;
            }
            /* a raised fit that does not fit its own slopes (a wrongly taken spot it follows, then
             * extrapolates) gives way to the stage's own order (mesh_raise_residual_px) */
            if (sw_ab_raise_rejected(Jf, Jk, res, p->mesh_raise_residual_px)) {
                if (cpu_fit(plan, w, n, Jk, c, &res) != 0) {
                    r->failure = SW_AB_SINGULAR;
                    continue;
                }
                for (int32_t j = Jk; j < Jf; j++)
                    c[j] = 0.0;
            }
            if (k == 0) {
                memcpy(r->prelim, c, (size_t)Jf * sizeof(double));
                r->prelim_ok = 1;
            }
            /* 3c: extrapolation over the eye's used lenslets: start = reference + D_k c_k */
            int32_t nk = w->first[e + 1] - w->first[e];
            const double *Dxe = w->Dx + (size_t)w->first[e] * ld;
            const double *Dye = w->Dy + (size_t)w->first[e] * ld;
            cblas_dgemv(CblasRowMajor, CblasNoTrans, nk, Jf - 1, 1.0, Dxe, ld, c + 1, 1, 0.0,
                        w->pred, 1);
            for (int32_t q = 0; q < nk; q++) {
                int32_t l = w->lens[w->first[e] + q];
                w->sx[l] = plan->ref_x[l] + w->pred[q];
            }
            cblas_dgemv(CblasRowMajor, CblasNoTrans, nk, Jf - 1, 1.0, Dye, ld, c + 1, 1, 0.0,
                        w->pred, 1);
            for (int32_t q = 0; q < nk; q++) {
                int32_t l = w->lens[w->first[e] + q];
                w->sy[l] = plan->ref_y[l] + w->pred[q];
            }
        }
    }

    /* step 4: the search of every used lenslet of the eyes still valid */
    for (int32_t l = 0; l < nl; l++) {
        int e = w->eye[l] - 1;
        w->active[l] = e >= 0 && raw->eye[e].failure == SW_AB_OK;
        if (!w->active[l])
            w->sx[l] = w->sy[l] = NAN;
    }
    st = sw_search_run(sl->search, frame, w->sx, w->sy, w->active, SW_MEM_HOST, w->x, w->y, NULL,
                       w->status);
    if (st != SW_OK)
        return st;
    /* the mesh check (step 4): with the dynamic mesh, a spot found farther than mesh_tolerance
     * pitches from its start converged onto another lenslet's spot */
    if (plan->dynamic && plan->mesh_tol_px > 0.0) {
        for (int32_t l = 0; l < nl; l++)
            if (w->status[l] == SW_SPOT_OK &&
                sw_ab_off_mesh(w->x[l], w->y[l], w->sx[l], w->sy[l], plan->mesh_tol_px))
                w->status[l] = SW_SPOT_SPACING;
    }

    /* step 5: the final fit per eye to the kept slopes */
    for (int e = 0; e < p->n_eyes; e++) {
        sw_ab_raw_eye *r = &raw->eye[e];
        if (r->failure != SW_AB_OK)
            continue;
        int32_t n = 0;
        for (int32_t k = w->first[e]; k < w->first[e + 1]; k++) {
            uint8_t s = w->status[w->lens[k]];
            if (s == SW_SPOT_OK)
                w->sel[n++] = k;
            if (s == SW_SPOT_EMPTY)
                r->discarded[0]++;
            else if (s == SW_SPOT_SPACING)
                r->discarded[1]++;
            else if (s == SW_SPOT_ISOLATED)
                r->discarded[2]++;
        }
        r->kept = n;
        r->found = n + r->discarded[0] + r->discarded[1] + r->discarded[2];
        if (2 * n < J - 1) {
            r->failure = SW_AB_FEW_SPOTS;
            continue;
        }
        if (cpu_fit(plan, w, n, J, r->coef, &r->residual) != 0) {
            r->failure = SW_AB_SINGULAR;
            continue;
        }
        /* outlier rejection: the worst spot (cpu_fit left the residuals D c - s in w->s, x rows
         * then y rows; the lowest lenslet index on a tie), refit without it */
        while (r->outliers < SW_AB_MAX_OUTLIERS && 2 * (n - 1) >= J - 1) {
            int32_t worst = -1;
            double w2 = -1.0;
            for (int32_t k = 0; k < n; k++) {
                const double v2 = w->s[k] * w->s[k] + w->s[n + k] * w->s[n + k];
                if (v2 > w2) {
                    w2 = v2;
                    worst = k;
                }
            }
            if (!sw_ab_outlier(w2, r->residual, p->outlier_sigma, p->outlier_min_px))
                break;
            w->status[w->lens[w->sel[worst]]] = SW_SPOT_OUTLIER;
            memmove(w->sel + worst, w->sel + worst + 1, (size_t)(n - worst - 1) * sizeof *w->sel);
            n--;
            r->outliers++;
            if (cpu_fit(plan, w, n, J, r->coef, &r->residual) != 0) {
                r->failure = SW_AB_SINGULAR;
                break;
            }
        }
    }
    w->have_last = 1;
    return SW_OK;
}

/* ------------------------------------------------------------------ runs */

static sw_status check_frame(sw_aberrometry_plan *plan, const sw_image *frame, int32_t k)
{
    if (!frame)
        return sw_fail(plan->ctx, SW_EINVAL, "aberrometry: frame %d is NULL", k);
    sw_status st = sw_image_check(plan->ctx, frame);
    if (st != SW_OK)
        return st;
    if (frame->width != plan->p.width || frame->height != plan->p.height ||
        frame->type != plan->p.type)
        return sw_fail(plan->ctx, SW_EINVAL,
                       "aberrometry: frame %d is %d x %d %s, the plan was made for %d x %d %s", k,
                       frame->width, frame->height, sw_pixel_type_string(frame->type),
                       plan->p.width, plan->p.height, sw_pixel_type_string(plan->p.type));
    if (frame->memory == SW_MEM_DEVICE && !plan->cuda)
        return sw_fail(plan->ctx, SW_EINVAL,
                       "aberrometry: frame %d is a device frame on a CPU "
                       "context",
                       k);
    return SW_OK;
}

#ifdef SW_HAVE_CUDA
/* A slot's failure, with its message on the plan's context. */
static sw_status slot_status(sw_aberrometry_plan *plan, int s, sw_status st)
{
    if (st != SW_OK && plan->slot[s].ctx != plan->ctx)
        sw_fail(plan->ctx, st, "%s", sw_context_error(plan->slot[s].ctx));
    return st;
}

/* Slot s's frame: its result, after the spots path on the host for a pupil the device's glow
 * path did not find (pupil.h); when that finds one, the frame runs again on the slot with the
 * pupils set (sw_pupil_gpu_preset), so a frame with glow costs nothing more. */
static sw_status gpu_collect(sw_aberrometry_plan *plan, int s, const sw_image *frame,
                             sw_aberrometry_result *out)
{
    sw_pupil_result pr;
    sw_ab_raw raw;
    sw_pupil_plan *pp = plan->slot[s].pupil;
    sw_status st = slot_status(plan, s, sw_ab_gpu_collect(plan, s, &pr, &raw));
    int redo = 0;
    if (st == SW_OK)
        st = slot_status(plan, s, sw_pupil_gpu_fallback(pp, frame, &pr, &redo));
    if (st == SW_OK && redo) {
        sw_pupil_gpu_preset(pp);
        st = slot_status(plan, s, sw_ab_gpu_enqueue(plan, s, frame));
        if (st == SW_OK)
            st = slot_status(plan, s, sw_ab_gpu_collect(plan, s, &pr, &raw));
    }
    if (st != SW_OK)
        return st;
    return sw_ab_result_fill(plan, &pr, &raw, out);
}
#endif

sw_status sw_aberrometry_run_batch(sw_aberrometry_plan *plan, const sw_image *const *frames,
                                   int32_t n, sw_aberrometry_result *out)
{
    if (!plan)
        return sw_fail(NULL, SW_EINVAL, "aberrometry: plan is NULL");
    if (!frames || !out || n < 1)
        return sw_fail(plan->ctx, SW_EINVAL,
                       "aberrometry: frames or results NULL, or frame count %d below 1", n);
    sw_status st;
    for (int32_t k = 0; k < n; k++)
        if ((st = check_frame(plan, frames[k], k)) != SW_OK)
            return st;

    if (!plan->cuda) {
        for (int32_t k = 0; k < n; k++) {
            sw_pupil_result pr;
            sw_ab_raw raw;
            plan->last_slot = 0;
            if ((st = cpu_frame(plan, frames[k], &pr, &raw)) != SW_OK)
                return st;
            if ((st = sw_ab_result_fill(plan, &pr, &raw, &out[k])) != SW_OK)
                return st;
        }
        return SW_OK;
    }
#ifdef SW_HAVE_CUDA
    /* frame k on slot k mod S; slot s is collected before it takes its next frame */
    const int32_t S = plan->n_slots;
    int32_t pending[SW_AB_MAX_STREAMS];
    for (int s = 0; s < S; s++)
        pending[s] = -1;
    st = SW_OK;
    for (int32_t k = 0; k < n && st == SW_OK; k++) {
        int s = (int)(k % S);
        if (pending[s] >= 0) {
            st = gpu_collect(plan, s, frames[pending[s]], &out[pending[s]]);
            pending[s] = -1;
            if (st != SW_OK)
                break;
        }
        st = slot_status(plan, s, sw_ab_gpu_enqueue(plan, s, frames[k]));
        if (st == SW_OK) {
            pending[s] = k;
            plan->last_slot = s;
        }
    }
    /* the frames still in flight, in order (after a failure: drained, results dropped) */
    for (int32_t k = 0; k < n; k++) {
        int s = (int)(k % S);
        if (pending[s] != k)
            continue;
        if (st == SW_OK) {
            st = gpu_collect(plan, s, frames[k], &out[k]);
        } else {
            sw_pupil_result pr;
            sw_ab_raw raw;
            (void)sw_ab_gpu_collect(plan, s, &pr, &raw);
        }
        pending[s] = -1;
    }
    return st;
#else
    return sw_fail(plan->ctx, SW_EINTERNAL, "aberrometry: CUDA context in a build without CUDA");
#endif
}

sw_status sw_aberrometry_run(sw_aberrometry_plan *plan, const sw_image *frame,
                             sw_aberrometry_result *out)
{
    const sw_image *frames[1] = {frame};
    return sw_aberrometry_run_batch(plan, frames, 1, out);
}

sw_status sw_aberrometry_spots(sw_aberrometry_plan *plan, double *x, double *y, uint8_t *status,
                               uint8_t *eye, double *x0, double *y0)
{
    if (!plan)
        return sw_fail(NULL, SW_EINVAL, "aberrometry: plan is NULL");
    if (plan->last_slot < 0 || (plan->cpu && !plan->cpu->have_last))
        return sw_fail(plan->ctx, SW_EINVAL, "aberrometry: no frame has been run yet");
    if (plan->cuda) {
#ifdef SW_HAVE_CUDA
        return slot_status(plan, plan->last_slot,
                           sw_ab_gpu_spots(plan, plan->last_slot, x, y, status, eye, x0, y0));
#else
        return sw_fail(plan->ctx, SW_EINTERNAL, "aberrometry: CUDA plan in a build without CUDA");
#endif
    }
    const struct sw_ab_cpu *w = plan->cpu;
    const size_t nd = (size_t)plan->nl * sizeof(double), nb = (size_t)plan->nl;
    if (x)
        memcpy(x, w->x, nd);
    if (y)
        memcpy(y, w->y, nd);
    if (status)
        memcpy(status, w->status, nb);
    if (eye)
        memcpy(eye, w->eye, nb);
    if (x0)
        memcpy(x0, w->sx, nd);
    if (y0)
        memcpy(y0, w->sy, nd);
    return SW_OK;
}

void sw_aberrometry_enable_timing(sw_aberrometry_plan *plan, int on)
{
    if (plan)
        plan->timing = on != 0;
}

void sw_aberrometry_stage_us(const sw_aberrometry_plan *plan, double us[SW_AB_STAGES])
{
    if (!us)
        return;
    for (int k = 0; k < SW_AB_STAGES; k++)
        us[k] = -1.0;
    if (!plan || !plan->cuda || plan->last_slot < 0)
        return;
#ifdef SW_HAVE_CUDA
    sw_ab_gpu_stage_us(plan, plan->last_slot, us);
#endif
}

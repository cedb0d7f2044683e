/*
 * The star simulator of seed 004: plans, validation, star packing and the CPU renderers.
 *
 * A star of flux g (seed Eq. 1) at (X, Y) adds phi = g * mu(x, y) (seed Eq. 3) to each pixel
 * (x, y) of its ROI, mu being the Gaussian PSF of seed Eq. (2) (psf.h: sampled at the pixel
 * centre, or integrated over the pixel). The ROI is the roi_side x roi_side block whose centre is
 * nearest the star (sim.h), clipped at the image's edges.
 *
 * CPU renderers (both evaluate in double and add into the f32 image star after star, in the
 * order of the list, so that they give the same bits):
 *   SEQUENTIAL - the seed's baseline (Sec. III.A, Fig. 5): one thread; for each star, for each
 *                ROI pixel inside the image, evaluate the PSF and add flux * w(dx) * w(dy).
 *   OPENMP     - threads own bands of rows; each thread walks all stars and adds the part of
 *                each ROI that falls in its band, with the star's separable weights computed
 *                once per band. No atomics; each pixel sees the stars in list order, so the
 *                image is bit-identical to SEQUENTIAL and to itself for any thread count (it is
 *                also the CPU's DETERMINISTIC method).
 * GPU renderers (PARALLEL: seed Fig. 6; ADAPTIVE: seed Sec. III.C; DETERMINISTIC) live in
 * starsim_cuda.cu and take the same packed stars.
 */
#include "sim/sim_internal.h"
#include "sim/psf.h"

#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#ifdef SW_HAVE_OPENMP
#include <omp.h>
#endif

/* AUTO on the GPU before starsim_cuda.cu has measured anything: the seed's inflection point
 * (Table III: 2^13 stars at ROI 10). */
#define SW_STARSIM_DEFAULT_ADAPTIVE_FROM 8192

void sw_starsim_params_default(sw_starsim_params *p)
{
    if (!p)
        return;
    memset(p, 0, sizeof *p);
    p->width = 1024;
    p->height = 1024;
    p->sigma = 1.0;
    p->roi_side = 11;
    p->psf = SW_PSF_INTEGRATED;
    p->method = SW_STARSIM_AUTO;
    p->phase_bins = 256;
    p->max_stars = (int64_t)1 << 17;
}

static const char *const method_names[] = {"auto",     "sequential", "openmp",
                                           "parallel", "adaptive",   "deterministic"};

const char *sw_starsim_method_string(sw_starsim_method m)
{
    if ((int)m < 0 || (int)m > (int)SW_STARSIM_DETERMINISTIC)
        return "?";
    return method_names[m];
}

sw_status sw_starsim_method_parse(const char *text, sw_starsim_method *out)
{
    if (!text || !out)
        return sw_fail(NULL, SW_EINVAL, "sw_starsim_method_parse: NULL argument");
    for (int i = 0; i <= (int)SW_STARSIM_DETERMINISTIC; i++)
        if (strcasecmp(text, method_names[i]) == 0) {
            *out = (sw_starsim_method)i;
            return SW_OK;
        }
    return sw_fail(NULL, SW_EINVAL,
                   "unknown star simulator method \"%s\": expected auto, sequential, openmp, "
                   "parallel, adaptive or deterministic",
                   text);
}

static int is_gpu_only(sw_starsim_method m)
{
    return m == SW_STARSIM_PARALLEL || m == SW_STARSIM_ADAPTIVE;
}

static int on_cuda(const sw_starsim *plan)
{
    return plan->ctx && plan->ctx->backend == SW_BACKEND_CUDA;
}

/* The method a run of n stars uses. */
static sw_starsim_method resolve(const sw_starsim *plan, int64_t n)
{
    sw_starsim_method m = plan->p.method;
    if (m != SW_STARSIM_AUTO)
        return m;
    if (!on_cuda(plan))
        return SW_STARSIM_OPENMP;
    return n < plan->auto_adaptive_from ? SW_STARSIM_PARALLEL : SW_STARSIM_ADAPTIVE;
}

static sw_status check_params(sw_context *ctx, const sw_starsim_params *p)
{
    if (p->width <= 0 || p->height <= 0 || p->width > SW_IMAGE_MAX_DIM ||
        p->height > SW_IMAGE_MAX_DIM ||
        (int64_t)p->width * (int64_t)p->height > SW_IMAGE_MAX_PIXELS)
        return sw_fail(ctx, SW_EINVAL,
                       "star simulator: image size %dx%d is not valid (1 to %d per side, at most "
                       "%lld pixels)",
                       p->width, p->height, SW_IMAGE_MAX_DIM, SW_IMAGE_MAX_PIXELS);
    if (!(p->sigma > 0.0) || !isfinite(p->sigma))
        return sw_fail(ctx, SW_EINVAL,
                       "star simulator: PSF sigma %g px must be positive and finite", p->sigma);
    const int32_t larger = p->width > p->height ? p->width : p->height;
    if (p->roi_side < 1)
        return sw_fail(ctx, SW_EINVAL, "star simulator: ROI side %d px must be at least 1",
                       p->roi_side);
    if (p->roi_side > SW_STARSIM_MAX_ROI_SIDE)
        return sw_fail(ctx, SW_EINVAL,
                       "star simulator: ROI side %d px is larger than the %d px spotwave accepts",
                       p->roi_side, SW_STARSIM_MAX_ROI_SIDE);
    if (p->roi_side > larger)
        return sw_fail(ctx, SW_EINVAL,
                       "star simulator: ROI side %d px is larger than the %dx%d image (at most %d)",
                       p->roi_side, p->width, p->height, larger);
    if (p->psf != SW_PSF_SAMPLED && p->psf != SW_PSF_INTEGRATED)
        return sw_fail(ctx, SW_EINVAL, "star simulator: unknown PSF mode %d", (int)p->psf);
    if ((int)p->method < 0 || (int)p->method > (int)SW_STARSIM_DETERMINISTIC)
        return sw_fail(ctx, SW_EINVAL, "star simulator: unknown method %d", (int)p->method);
    if (p->phase_bins < 1 || p->phase_bins > 4096)
        return sw_fail(ctx, SW_EINVAL, "star simulator: %d phase bins: expected 1 to 4096",
                       p->phase_bins);
    if (p->max_stars < 1 || p->max_stars > INT32_MAX)
        return sw_fail(ctx, SW_EINVAL, "star simulator: max_stars %lld: expected 1 to %d",
                       (long long)p->max_stars, INT32_MAX);
    return SW_OK;
}

sw_status sw_starsim_create(sw_context *ctx, const sw_starsim_params *p, sw_starsim **out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_starsim_create: out is NULL");
    *out = NULL;
    if (!ctx || !p)
        return sw_fail(ctx, SW_EINVAL, "sw_starsim_create: %s is NULL", ctx ? "params" : "context");
    sw_status st = check_params(ctx, p);
    if (st != SW_OK)
        return st;
    if (is_gpu_only(p->method) && ctx->backend != SW_BACKEND_CUDA)
        return sw_fail(ctx, SW_EUNSUPPORTED,
                       "star simulator: method \"%s\" runs on the GPU only and this context uses "
                       "the CPU (use auto, sequential, openmp or deterministic)",
                       sw_starsim_method_string(p->method));

    /* the packed list, on the host and (CUDA) again on the device */
    SW_TRY(sw_memory_check(ctx, (uint64_t)p->max_stars, sizeof(sw_packed_star),
                           "star simulator: the packed list of %lld stars",
                           (long long)p->max_stars));
    sw_starsim *plan = calloc(1, sizeof *plan);
    if (!plan)
        return sw_fail(ctx, SW_ENOMEM, "star simulator: out of memory");
    plan->ctx = ctx;
    plan->p = *p;
    plan->auto_adaptive_from = SW_STARSIM_DEFAULT_ADAPTIVE_FROM;
    plan->cpu_threads = sw_context_threads(ctx);
    if (plan->cpu_threads < 1)
        plan->cpu_threads = 1;
    /* pinned on CUDA, so that the star uploads are asynchronous DMA (pageable when that fails) */
    const size_t packed_bytes = (size_t)p->max_stars * sizeof *plan->packed;
    if (ctx->backend == SW_BACKEND_CUDA) {
        plan->packed = sw_host_alloc(ctx, packed_bytes, 1);
        plan->packed_pinned = plan->packed != NULL;
    }
    if (!plan->packed)
        plan->packed = malloc(packed_bytes);
    plan->band_count =
        malloc((size_t)plan->cpu_threads * (SW_STARSIM_MAX_BANDS + 1) * sizeof *plan->band_count);
    plan->band_id = malloc((size_t)p->max_stars);
    plan->band_order = malloc((size_t)p->max_stars * sizeof *plan->band_order);
    plan->row_band = malloc((size_t)p->height);
    size_t nw;
    if (!sw_mul_ok((size_t)plan->cpu_threads * 2u, (size_t)p->roi_side, &nw) ||
        !sw_mul_ok(nw, sizeof(double), &nw) || !(plan->cpu_w = malloc(nw)) || !plan->packed ||
        !plan->band_count || !plan->band_id || !plan->band_order || !plan->row_band) {
        sw_starsim_destroy(plan);
        return sw_fail(ctx, SW_ENOMEM, "star simulator: out of memory for %lld stars",
                       (long long)p->max_stars);
    }
#ifdef SW_HAVE_CUDA
    if (ctx->backend == SW_BACKEND_CUDA) {
        st = sw_image_alloc_device(ctx, p->width, p->height, SW_PIX_F32, &plan->gpu_image);
        if (st == SW_OK)
            st = sw_starsim_gpu_create(plan);
        if (st != SW_OK) {
            sw_starsim_destroy(plan);
            return st;
        }
    }
#endif
    plan->used = resolve(plan, p->max_stars);
    *out = plan;
    return SW_OK;
}

void sw_starsim_destroy(sw_starsim *plan)
{
    if (!plan)
        return;
#ifdef SW_HAVE_CUDA
    if (plan->gpu)
        sw_starsim_gpu_destroy(plan);
#endif
    sw_image_free(&plan->gpu_image);
    sw_image_free(&plan->host_image);
    sw_host_free(plan->packed, plan->packed_pinned);
    free(plan->band_count);
    free(plan->band_id);
    free(plan->band_order);
    free(plan->row_band);
    free(plan->cpu_w);
    free(plan);
}

sw_status sw_starsim_set_bands(sw_starsim *plan, int32_t bands)
{
    if (!plan)
        return sw_fail(NULL, SW_EINVAL, "sw_starsim_set_bands: plan is NULL");
    if (bands < 0 || bands > SW_STARSIM_MAX_BANDS)
        return sw_fail(plan->ctx, SW_EINVAL, "star simulator: %d bands: expected 0 to %d", bands,
                       SW_STARSIM_MAX_BANDS);
    plan->bands = bands;
    return SW_OK;
}

sw_starsim_method sw_starsim_method_used(const sw_starsim *plan)
{
    return plan ? plan->used : SW_STARSIM_AUTO;
}

int64_t sw_starsim_rendered(const sw_starsim *plan)
{
    return plan ? plan->rendered : 0;
}

/* ------------------------------------------------------------------ packing */

/* sw_roi_origin (psf.h) for |pos| well inside int: the same floor of the same double, taken by
 * truncation and a correction instead of a call to floor (not inlined without SSE4.1). */
static inline int roi_origin(double pos, int side)
{
    const double v = pos - 0.5 * (double)(side - 1) + 0.5;
    const int i = (int)v; /* towards zero */
    return i - (v < (double)i);
}

/* The ROI origin of a star at (X, Y) when its ROI touches the image (sim_internal.h: x0 =
 * sw_roi_origin(X, side)); 0 when it misses (skipped). The star has been validated (finite). */
static inline int star_origin(const sw_starsim *plan, double X, double Y, int *x0, int *y0)
{
    const int side = plan->p.roi_side;
    const double w = plan->p.width, h = plan->p.height;
    /* Far outside: skip before converting to int (the ROI spans side pixels around X). */
    if (X < -(double)side - 1.0 || X > w + (double)side || Y < -(double)side - 1.0 ||
        Y > h + (double)side)
        return 0;
    *x0 = roi_origin(X, side); /* |X|, |Y| < the image's size + side + 1: inside int */
    *y0 = roi_origin(Y, side);
    return !(*x0 + side <= 0 || *x0 >= plan->p.width || *y0 + side <= 0 || *y0 >= plan->p.height);
}

/* 1 when star i is not acceptable (star_message says why). */
static inline int star_bad(const sw_stars *s, int64_t i)
{
    return !isfinite(s->x[i]) || !isfinite(s->y[i]) || !isfinite(s->flux[i]) || s->flux[i] < 0.0 ||
           s->flux[i] > FLT_MAX;
}

static sw_status star_message(sw_context *ctx, const sw_stars *s, int64_t i)
{
    if (!isfinite(s->x[i]) || !isfinite(s->y[i]))
        return sw_fail(ctx, SW_EINVAL, "star %lld: position (%g, %g) is not finite", (long long)i,
                       s->x[i], s->y[i]);
    return sw_fail(ctx, SW_EINVAL,
                   "star %lld: flux %g e- must be finite, non-negative and at most %g",
                   (long long)i, s->flux[i], (double)FLT_MAX);
}

/* Stars per thread below which the packing stays on one thread (a parallel region costs a few
 * microseconds). */
#define SW_PACK_GRAIN 4096

/*
 * Validates the stars and packs those whose ROI touches the image, in one parallel sweep of
 * two passes over contiguous chunks of the list (one chunk per thread): pass 1 checks each star
 * (the first bad one, in list order, is reported and nothing is packed) and counts the packed
 * stars of each band; pass 2 writes them, band after band, each band's stars in list order
 * (nb = 1: the list's order, as the CPU renderers need it). Band of a star: its ROI's first
 * row, clamped to the image, divided by hb. off[0..nb] receives the bands' first packed
 * indices, off[nb] the count.
 */
static sw_status pack_stars(sw_starsim *plan, const sw_stars *s, int nb, int32_t hb, int64_t *off)
{
    const int64_t count = s->count;
    int nt = plan->cpu_threads;
    if ((int64_t)nt * SW_PACK_GRAIN > count)
        nt = (int)(count / SW_PACK_GRAIN) > 1 ? (int)(count / SW_PACK_GRAIN) : 1;
    const int stride = SW_STARSIM_MAX_BANDS + 1; /* counts of thread t: band_count[t * stride] */
    int64_t *cnt = plan->band_count;
    int64_t bad = count; /* the first bad star */
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        const int t = sw_omp_thread(), team = sw_omp_threads();
        const int64_t i0 = count * t / team, i1 = count * (t + 1) / team;
        int64_t *c = cnt + (size_t)t * stride;
        for (int k = 0; k < nb; k++)
            c[k] = 0;
        int64_t mine = count;
        for (int64_t i = i0; i < i1; i++) {
            if (star_bad(s, i)) {
                mine = i;
                break;
            }
            int x0, y0;
            if (star_origin(plan, s->x[i], s->y[i], &x0, &y0))
                c[nb > 1 ? (y0 > 0 ? y0 : 0) / hb : 0]++;
        }
        if (mine < count) {
#pragma omp critical(sw_starsim_pack)
            if (mine < bad)
                bad = mine;
        }
#pragma omp barrier
#pragma omp single
        {
            /* band-major offsets: band k, then thread t within it */
            int64_t at = 0;
            for (int k = 0; k < nb; k++) {
                off[k] = at;
                for (int u = 0; u < team; u++) {
                    const int64_t n = cnt[(size_t)u * stride + k];
                    cnt[(size_t)u * stride + k] = at;
                    at += n;
                }
            }
            off[nb] = at;
        } /* implied barrier */
        if (bad == count) {
            for (int64_t i = i0; i < i1; i++) {
                const double X = s->x[i], Y = s->y[i];
                int x0, y0;
                if (!star_origin(plan, X, Y, &x0, &y0))
                    continue;
                sw_packed_star *ps = &plan->packed[c[nb > 1 ? (y0 > 0 ? y0 : 0) / hb : 0]++];
                ps->x0 = x0;
                ps->y0 = y0;
                ps->dx = (float)(X - (double)x0);
                ps->dy = (float)(Y - (double)y0);
                ps->flux = (float)s->flux[i];
                ps->pad = 0.0f;
            }
        }
    }
    if (bad < count)
        return star_message(plan->ctx, s, bad);
    return SW_OK;
}

#ifdef SW_HAVE_CUDA
/*
 * Pass 1 of run_bands over stars [i0, i1): the first bad star (i1 when none), each star's band
 * in bid (255: its ROI misses the image), the bands' counts in cnt[0..nb), and (total != NULL)
 * the packed fluxes' sum. The same tests as star_bad and star_origin, on local copies of
 * everything the loop reads: its byte stores could otherwise alias them and force reloads.
 */
static int64_t band_pass1(const sw_starsim *plan, const sw_stars *s, int64_t i0, int64_t i1,
                          const uint8_t *row_band, int nb, uint8_t *restrict bid, int64_t *cnt,
                          double *total)
{
    const double *restrict xs = s->x, *restrict ys = s->y, *restrict fs = s->flux;
    const int side = plan->p.roi_side;
    const int32_t W = plan->p.width, H = plan->p.height;
    const double lo = -(double)side - 1.0, hix = (double)W + (double)side,
                 hiy = (double)H + (double)side;
    int64_t c[SW_STARSIM_MAX_BANDS] = {0};
    double sum = 0.0;
    int64_t i = i0;
    for (; i < i1; i++) {
        const double X = xs[i], Y = ys[i], F = fs[i];
        if (!isfinite(X) || !isfinite(Y) || !isfinite(F) || F < 0.0 || F > FLT_MAX)
            break;
        uint8_t k = 255;
        if (X >= lo && X <= hix && Y >= lo && Y <= hiy) {
            const int x0 = roi_origin(X, side), y0 = roi_origin(Y, side);
            if (x0 + side > 0 && x0 < W && y0 + side > 0 && y0 < H) {
                k = row_band[y0 > 0 ? y0 : 0];
                c[k]++;
                if (total)
                    sum += (double)(float)F;
            }
        }
        bid[i] = k;
    }
    for (int b = 0; b < nb; b++)
        cnt[b] = c[b];
    if (total)
        *total = sum;
    return i;
}

/*
 * A GPU run into a host image in nb > 1 bands of hb rows (sim_internal.h,
 * sw_starsim_gpu_bands_begin), with the packing pipelined behind the GPU. Threads 1.. (the
 * workers) own contiguous chunks of the list; thread 0 packs nothing when there are workers.
 * Pass 1 (workers): check each star, note its band (band_id, 255 when its ROI misses the
 * image; row_band: no division) and count the bands; DETERMINISTIC: add up the fluxes as
 * packed; then sort the chunk's star indices by band (band_order, list order kept). Then thread 0
 * reports the first bad star (list order) or a total flux beyond the fixed point, or places the
 * bands (band-major, each band's stars in list order: workers in order), resolves AUTO and
 * starts the GPU run; nothing is queued before. Pass 2: the workers pack band 0 and count
 * themselves done on it (done[0]), then band 1, ...; thread 0 waits for each band's count and
 * queues it (upload, rendering, rows back), so band b + 1 is packed while band b is on the bus.
 * With one thread, it packs a band and queues it in turn. *m and *n: the method and the stars
 * packed.
 */
static sw_status run_bands(sw_starsim *plan, const sw_stars *s, int nb, int32_t hb, sw_image *out,
                           sw_starsim_method *m, int64_t *n)
{
    const int64_t count = s->count;
    const int32_t H = plan->p.height;
    int nt = plan->cpu_threads;
    if ((int64_t)(nt - 1) * SW_PACK_GRAIN > count)
        nt = (int)(count / SW_PACK_GRAIN) + 1; /* at least 1 worker's worth per worker */
    if (nt < 1)
        nt = 1;
    const int stride = SW_STARSIM_MAX_BANDS + 1;
    const int det = plan->p.method == SW_STARSIM_DETERMINISTIC;
    int64_t *cnt = plan->band_count;
    uint8_t *bid = plan->band_id;
    int32_t *order = plan->band_order;
    if (plan->row_band_hb != hb) { /* the band of each row: no division per star */
        for (int32_t y = 0; y < H; y++)
            plan->row_band[y] = (uint8_t)(y / hb);
        plan->row_band_hb = hb;
    }
    const uint8_t *row_band = plan->row_band;
    int64_t off[SW_STARSIM_MAX_BANDS + 1];
    double *flux = plan->cpu_w; /* per worker partial sums (cpu_threads x 2 roi_side doubles) */
    atomic_int done[SW_STARSIM_MAX_BANDS];
    for (int k = 0; k < SW_STARSIM_MAX_BANDS; k++)
        atomic_init(&done[k], 0);
    int64_t bad = count;
    int refused = 0;
    sw_status st = SW_OK;
    sw_starsim_method used = SW_STARSIM_AUTO;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        const int t = sw_omp_thread(), team = sw_omp_threads();
        const int nw = team > 1 ? team - 1 : 1, w = team > 1 ? t - 1 : 0; /* w < 0: no chunk */
        const int64_t i0 = w >= 0 ? count * w / nw : 0, i1 = w >= 0 ? count * (w + 1) / nw : 0;
        int64_t *c = cnt + (size_t)(w >= 0 ? w : 0) * stride;
        int64_t lo[SW_STARSIM_MAX_BANDS + 1]; /* the worker's bands in its part of order[] */
        if (w >= 0) {
            const int64_t first_bad =
                band_pass1(plan, s, i0, i1, row_band, nb, bid, c, det ? &flux[w] : NULL);
            const int64_t mine = first_bad < i1 ? first_bad : count;
            if (mine < count) {
#pragma omp critical(sw_starsim_pack)
                if (mine < bad)
                    bad = mine;
            } else {
                /* the chunk's indices sorted by band (a counting sort, list order kept), so that
                 * pass 2 walks each band's stars only */
                int64_t pos[SW_STARSIM_MAX_BANDS];
                lo[0] = i0;
                for (int k = 0; k < nb; k++) {
                    pos[k] = lo[k];
                    lo[k + 1] = lo[k] + c[k];
                }
                const uint8_t *restrict bk = bid;
                int32_t *restrict ord = order;
                for (int64_t i = i0; i < i1; i++)
                    if (bk[i] != 255)
                        ord[pos[bk[i]]++] = (int32_t)i;
            }
        }
#pragma omp barrier
#pragma omp master
        {
            if (bad == count) {
                int64_t at = 0;
                for (int k = 0; k < nb; k++) {
                    off[k] = at;
                    for (int u = 0; u < nw; u++) {
                        const int64_t q = cnt[(size_t)u * stride + k];
                        cnt[(size_t)u * stride + k] = at;
                        at += q;
                    }
                }
                off[nb] = at;
                double total = 0.0;
                for (int u = 0; u < nw && det; u++)
                    total += flux[u];
                if (det && !(total < SW_STARSIM_DETERMINISTIC_MAX_FLUX)) {
                    refused = 1;
                    st = sw_fail(plan->ctx, SW_ERANGE,
                                 "star simulator: the deterministic method sums in fixed point and "
                                 "takes at most %g e- per run; these stars carry %g e-",
                                 SW_STARSIM_DETERMINISTIC_MAX_FLUX, total);
                } else {
                    used = resolve(plan, at);
                    st = sw_starsim_gpu_bands_begin(plan, used);
                    refused = st != SW_OK;
                }
            }
        }
#pragma omp barrier
        if (bad == count && !refused) {
            for (int k = 0; k < nb; k++) {
                if (w >= 0) {
                    const double *restrict xs = s->x, *restrict ys = s->y, *restrict fs = s->flux;
                    const int32_t *restrict ord = order;
                    sw_packed_star *restrict ps = plan->packed + c[k];
                    const int side = plan->p.roi_side;
                    for (int64_t j = lo[k]; j < lo[k + 1]; j++, ps++) {
                        const int64_t i = ord[j];
                        const double X = xs[i], Y = ys[i];
                        const int x0 = roi_origin(X, side), y0 = roi_origin(Y, side);
                        ps->x0 = x0;
                        ps->y0 = y0;
                        ps->dx = (float)(X - (double)x0);
                        ps->dy = (float)(Y - (double)y0);
                        ps->flux = (float)fs[i];
                        ps->pad = 0.0f;
                    }
                    atomic_fetch_add_explicit(&done[k], 1, memory_order_release);
                }
                if (t == 0) {
                    while (atomic_load_explicit(&done[k], memory_order_acquire) < nw)
                        ;
                    if (st == SW_OK)
                        st = sw_starsim_gpu_band(plan, k, plan->packed, off[k], off[k + 1] - off[k],
                                                 k * hb, (k + 1) * hb < H ? (k + 1) * hb : H, used,
                                                 out);
                }
            }
        }
    }
    if (bad < count)
        return star_message(plan->ctx, s, bad);
    if (refused)
        return st;
    /* queued so far: wait for it even after a failure (the packed list stays in use) */
    const sw_status st2 = sw_starsim_gpu_bands_end(plan);
    if (st != SW_OK)
        return st;
    *m = used;
    *n = off[nb];
    return st2;
}
#endif

/* Bands of a run into a host image by a GPU method (sw_starsim_set_bands): nb bands of *hb
 * rows, every band at least roi_side rows. */
static int choose_bands(const sw_starsim *plan, int32_t *hb)
{
    const int32_t H = plan->p.height, side = plan->p.roi_side;
    int nb = plan->bands;
    if (nb == 0) {
        const double bytes = 4.0 * (double)plan->p.width * (double)H;
        nb = (int)(bytes / (512.0 * 1024.0));
        nb = nb < 1 ? 1 : nb > 8 ? 8 : nb;
    }
    if (nb > H / side)
        nb = H / side > 1 ? H / side : 1;
    *hb = (H + nb - 1) / nb;
    return (H + *hb - 1) / *hb; /* rounding may leave fewer */
}

/* ------------------------------------------------------------------ CPU renderers */

/* One-dimensional PSF weight at offset d = pixel centre - star (psf.h). */
static inline double psf_w(int integrated, double d, double sigma)
{
    return integrated ? sw_psf_w_integrated(d, sigma) : sw_psf_w_sampled(d, sigma);
}

static void clear_rows(sw_image *out, int32_t y0, int32_t y1)
{
    for (int32_t y = y0; y < y1; y++)
        memset(sw_image_row(out, y), 0, (size_t)out->width * sizeof(float));
}

/* Seed Fig. 5: for each star, for each pixel of its ROI that lies in the image, add the star's
 * contribution (seed Eq. 3), the PSF evaluated for that pixel. */
static void render_sequential(const sw_starsim *plan, int64_t n, sw_image *out)
{
    const int side = plan->p.roi_side, integrated = plan->p.psf == SW_PSF_INTEGRATED;
    const int32_t W = plan->p.width, H = plan->p.height;
    const double sigma = plan->p.sigma;
    clear_rows(out, 0, H);
    for (int64_t i = 0; i < n; i++) {
        const sw_packed_star s = plan->packed[i];
        const double f = s.flux, dx = s.dx, dy = s.dy;
        for (int j = 0; j < side; j++) {
            const int32_t y = s.y0 + j;
            if (y < 0 || y >= H)
                continue;
            float *row = sw_image_row(out, y);
            for (int k = 0; k < side; k++) {
                const int32_t x = s.x0 + k;
                if (x < 0 || x >= W)
                    continue;
                const double wx = psf_w(integrated, (double)k - dx, sigma);
                const double wy = psf_w(integrated, (double)j - dy, sigma);
                row[x] = (float)((double)row[x] + f * wx * wy);
            }
        }
    }
}

/* Threads own bands of rows; each walks all stars in list order and adds the rows of their ROIs
 * inside its band. The separable weights f * w(dx) and w(dy) are evaluated once per star and
 * band; f * w(dx) * w(dy) rounds exactly as in render_sequential. */
static void render_openmp(const sw_starsim *plan, int64_t n, sw_image *out)
{
    const int side = plan->p.roi_side, integrated = plan->p.psf == SW_PSF_INTEGRATED;
    const int32_t W = plan->p.width, H = plan->p.height;
    const double sigma = plan->p.sigma;
    const sw_packed_star *stars = plan->packed;
#pragma omp parallel num_threads(plan->cpu_threads)
    {
        const int t = sw_omp_thread(), nt = sw_omp_threads();
        const int32_t r0 = (int32_t)((int64_t)H * t / nt),
                      r1 = (int32_t)((int64_t)H * (t + 1) / nt);
        double *fwx = plan->cpu_w + (size_t)t * 2u * (size_t)side, *wy = fwx + side;
        clear_rows(out, r0, r1);
        for (int64_t i = 0; i < n && r0 < r1; i++) {
            const sw_packed_star s = stars[i];
            const int j0 = s.y0 < r0 ? r0 - s.y0 : 0;
            const int j1 = s.y0 + side > r1 ? r1 - s.y0 : side;
            if (j0 >= j1)
                continue;
            const int k0 = s.x0 < 0 ? -s.x0 : 0;
            const int k1 = s.x0 + side > W ? W - s.x0 : side;
            const double f = s.flux, dx = s.dx, dy = s.dy;
            for (int k = k0; k < k1; k++)
                fwx[k] = f * psf_w(integrated, (double)k - dx, sigma);
            for (int j = j0; j < j1; j++)
                wy[j] = psf_w(integrated, (double)j - dy, sigma);
            for (int j = j0; j < j1; j++) {
                float *row = sw_image_row(out, s.y0 + j);
                const double wj = wy[j];
                for (int k = k0; k < k1; k++)
                    row[s.x0 + k] = (float)((double)row[s.x0 + k] + fwx[k] * wj);
            }
        }
    }
}

static void render_cpu(const sw_starsim *plan, sw_starsim_method m, int64_t n, sw_image *out)
{
    if (m == SW_STARSIM_SEQUENTIAL)
        render_sequential(plan, n, out);
    else
        render_openmp(plan, n, out);
}

/* ------------------------------------------------------------------ run */

static sw_status check_stars(sw_context *ctx, const sw_starsim *plan, const sw_stars *s)
{
    if (!s)
        return sw_fail(ctx, SW_EINVAL, "star simulator: the star list is NULL");
    if (s->count < 0)
        return sw_fail(ctx, SW_EINVAL, "star simulator: star count %lld is negative",
                       (long long)s->count);
    if (s->count > plan->p.max_stars)
        return sw_fail(ctx, SW_EINVAL,
                       "star simulator: %lld stars but the plan takes at most %lld (max_stars)",
                       (long long)s->count, (long long)plan->p.max_stars);
    if (s->count > 0 && (!s->x || !s->y || !s->flux))
        return sw_fail(ctx, SW_EINVAL, "star simulator: the star list has NULL arrays");
    return SW_OK; /* each star is checked as it is packed (pack_stars) */
}

static sw_status check_out(sw_context *ctx, const sw_starsim *plan, const sw_image *out)
{
    return sw_image_check_output(ctx, "star simulator", out, SW_PIX_F32, plan->p.width,
                                 plan->p.height, on_cuda(plan));
}

sw_status sw_starsim_run(sw_starsim *plan, const sw_stars *stars, sw_image *out)
{
    if (!plan)
        return sw_fail(NULL, SW_EINVAL, "sw_starsim_run: plan is NULL");
    sw_context *ctx = plan->ctx;
    sw_status st = check_out(ctx, plan, out);
    if (st == SW_OK)
        st = check_stars(ctx, plan, stars);
    if (st != SW_OK)
        return st;

    const int host_out = out->memory != SW_MEM_DEVICE;
    /* GPU methods into a host image go in bands of rows (sw_starsim_gpu_run_bands) */
    const sw_starsim_method pm = plan->p.method;
    const int gpu = on_cuda(plan) &&
                    (pm == SW_STARSIM_AUTO || is_gpu_only(pm) || pm == SW_STARSIM_DETERMINISTIC);
    int32_t hb = plan->p.height;
    /* pinned images only: a copy into pageable memory is staged by the host, which would wait
     * for each band's copy before it could queue the next band */
    const int nb = gpu && out->memory == SW_MEM_PINNED ? choose_bands(plan, &hb) : 1;
    int64_t off[SW_STARSIM_MAX_BANDS + 1];
#ifdef SW_HAVE_CUDA
    /* the last run's upload may still be reading the packed stars */
    if (on_cuda(plan) && (st = sw_starsim_gpu_wait_upload(plan)) != SW_OK)
        return st;
    if (nb > 1) {
        sw_starsim_method mb = SW_STARSIM_AUTO;
        int64_t nbs = 0;
        if ((st = run_bands(plan, stars, nb, hb, out, &mb, &nbs)) != SW_OK)
            return st;
        plan->used = mb;
        plan->rendered = nbs;
        return SW_OK;
    }
#endif
    if ((st = pack_stars(plan, stars, 1, hb, off)) != SW_OK)
        return st;
    const int64_t n = off[nb];
    const sw_starsim_method m = resolve(plan, n);

    if (!is_gpu_only(m) && (m != SW_STARSIM_DETERMINISTIC || !on_cuda(plan))) {
        /* CPU renderers; into a device image through a host image kept in the plan. */
        if (host_out) {
            render_cpu(plan, m, n, out);
        } else {
            if (!plan->host_image.data &&
                (st = sw_image_alloc(ctx, plan->p.width, plan->p.height, SW_PIX_F32,
                                     &plan->host_image)) != SW_OK)
                return st;
            render_cpu(plan, m, n, &plan->host_image);
            if ((st = sw_image_copy(ctx, &plan->host_image, out)) != SW_OK)
                return st;
        }
    } else {
#ifdef SW_HAVE_CUDA
        /* GPU renderers; into a host image through the device image kept in the plan. */
        if (host_out) {
            if ((st = sw_starsim_gpu_run(plan, plan->packed, n, m, &plan->gpu_image)) != SW_OK)
                return st;
            if ((st = sw_image_copy(ctx, &plan->gpu_image, out)) != SW_OK)
                return st;
        } else if ((st = sw_starsim_gpu_run(plan, plan->packed, n, m, out)) != SW_OK) {
            return st;
        }
#else
        return sw_fail(ctx, SW_EINTERNAL, "star simulator: GPU method in a build without CUDA");
#endif
    }
    plan->used = m;
    plan->rendered = n;
    return SW_OK;
}

double sw_starsim_render_us(sw_starsim *plan)
{
#ifdef SW_HAVE_CUDA
    if (plan && plan->gpu &&
        (plan->used == SW_STARSIM_PARALLEL || plan->used == SW_STARSIM_ADAPTIVE ||
         plan->used == SW_STARSIM_DETERMINISTIC))
        return sw_starsim_gpu_render_us(plan);
#endif
    (void)plan;
    return -1.0;
}

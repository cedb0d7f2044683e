/*
 * Reichenbach's centroid algorithm on the CPU (search.h "Reichenbach", seed 001 Sec. 3.2.2),
 * and the plan's state for both backends. The decisions the CPU and the GPU share are in
 * search_reich.h (read its top first); the GPU twin is search_reich_cuda.cu.
 *
 * A CPU run, in the seed's two phases:
 *   phase 1 (potential spots): the frame as floats and the threshold's row sums (OpenMP over
 *     rows), the row maxima of the peak box, the peak test and each peak's centre of mass
 *     (OpenMP over rows), stored per peak cell;
 *   phase 2 (correlation): the seed spot and block (the "5 x 5 spots in the centre of the pupil
 *     ... assigned to their closest positions"), then the growth rounds ("two previously
 *     calculated ones are used, and from their respective distance and direction an
 *     approximated position is extrapolated"): per round, every claimant's nearest free peak
 *     (OpenMP over spots, reading only the previous round's state), the claims, the winners.
 */
#include "centroid/search_reich.h"
#include "centroid/search_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct sw_reich {
    sw_context *ctx;
    sw_rh_cfg c;
    int threads;

    /* CPU state (host memory) */
    float *vals;           /* width * height: the frame as floats                         */
    float *hmax;           /* width * height: max over the row's peak-box span            */
    double *row_s, *row_q; /* height: the rows' threshold sums                           */
    int64_t *row_n;        /* height: the rows' finite pixels                              */
    int32_t *cell_pix;     /* ncells: raster index of the cell's peak, -1 when none        */
    double *cell_x, *cell_y, *cell_s0; /* ncells: the peak's centroid and intensity       */
    uint8_t *taken;   /* ncells: the peak was taken by a spot                         */
    uint64_t *claim;  /* ncells: the smallest claim key of the round                  */
    uint8_t *found;   /* nspots                                                        */
    int32_t *peak_of; /* nspots: the found spot's peak cell                            */
    int32_t *choice;  /* nspots: the cell chosen in this round, -1 when none            */
    uint64_t *key;    /* nspots: the key of that choice                                */
    double *fx, *fy;  /* nspots: positions of the found spots                          */

    int64_t last_peaks; /* CPU runs                                                       */
    int last_gpu;       /* the last run was on the GPU                                    */
    void *gpu;          /* search_reich_cuda.cu's state on a CUDA context                 */
};

/* ---------------------------------------------------------------- plan */

static sw_status resolve(sw_context *ctx, const sw_search_params *p, sw_rh_cfg *c)
{
    if (!p)
        return sw_fail(ctx, SW_EINVAL, "reichenbach: params is NULL");
    if (p->width < 3 || p->height < 3 || p->width > SW_IMAGE_MAX_DIM ||
        p->height > SW_IMAGE_MAX_DIM ||
        (int64_t)p->width * (int64_t)p->height > SW_IMAGE_MAX_PIXELS)
        return sw_fail(ctx, SW_EINVAL, "reichenbach: frame size %d x %d is out of range", p->width,
                       p->height);
    if (p->type != SW_PIX_U8 && p->type != SW_PIX_U16 && p->type != SW_PIX_F32)
        return sw_fail(ctx, SW_EINVAL, "reichenbach: pixel type %s is not u8, u16 or f32",
                       sw_pixel_type_string(p->type));
    if (p->nspots < 1 || p->nspots > (1 << 24))
        return sw_fail(ctx, SW_EINVAL, "reichenbach: nspots %d is not in 1 .. 2^24", p->nspots);
    if (p->nx < 1 || p->ny < 1 || (int64_t)p->nx * (int64_t)p->ny != p->nspots)
        return sw_fail(ctx, SW_EINVAL,
                       "reichenbach: needs a grid with nx * ny == nspots (nx %d, ny %d, nspots "
                       "%d)",
                       p->nx, p->ny, p->nspots);
    if (p->peak_box < 3 || p->peak_box > SW_SEARCH_MAX_BOX || p->peak_box % 2 == 0)
        return sw_fail(ctx, SW_EINVAL, "reichenbach: peak_box %d is not odd in 3 .. %d",
                       p->peak_box, SW_SEARCH_MAX_BOX);
    if (p->seed_size < 1 || p->seed_size > 15 || p->seed_size % 2 == 0)
        return sw_fail(ctx, SW_EINVAL, "reichenbach: seed_size %d is not odd in 1 .. 15",
                       p->seed_size);
    if (!(p->peak_threshold >= 0.0) || !isfinite(p->peak_threshold))
        return sw_fail(ctx, SW_EINVAL, "reichenbach: peak_threshold %g is not >= 0 and finite",
                       p->peak_threshold);
    double capture = p->capture_px;
    if (capture == 0.0)
        capture = p->pitch_px / 2.0;
    if (!(capture > 0.0) || !isfinite(capture) || !isfinite(capture * capture))
        return sw_fail(ctx, SW_EINVAL,
                       "reichenbach: capture_px %g (pitch_px %g) does not give a positive finite "
                       "capture radius",
                       p->capture_px, p->pitch_px);

    memset(c, 0, sizeof *c);
    c->width = p->width;
    c->height = p->height;
    c->type = p->type;
    c->nspots = p->nspots;
    c->nx = p->nx;
    c->ny = p->ny;
    c->box = p->peak_box;
    c->half = (p->peak_box - 1) / 2;
    c->threshold = p->peak_threshold;
    c->seed_half = (p->seed_size - 1) / 2;
    c->capture = capture;
    c->capture2 = capture * capture;
    c->cell = c->half + 1;
    c->mw = (p->width + c->cell - 1) / c->cell;
    c->mh = (p->height + c->cell - 1) / c->cell;
    c->ncells = (int64_t)c->mw * (int64_t)c->mh;
    c->rounds = 1 + p->nx + p->ny + p->seed_size;
    return SW_OK;
}

void sw_reich_destroy(sw_reich *r)
{
    if (!r)
        return;
#ifdef SW_HAVE_CUDA
    if (r->gpu)
        sw_reich_gpu_destroy(r->gpu);
#endif
    free(r->vals);
    free(r->hmax);
    free(r->row_s);
    free(r->row_q);
    free(r->row_n);
    free(r->cell_pix);
    free(r->cell_x);
    free(r->cell_y);
    free(r->cell_s0);
    free(r->taken);
    free(r->claim);
    free(r->found);
    free(r->peak_of);
    free(r->choice);
    free(r->key);
    free(r->fx);
    free(r->fy);
    free(r);
}

sw_status sw_reich_create(sw_context *ctx, const sw_search_params *p, sw_reich **out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "reichenbach: out is NULL");
    *out = NULL;
    sw_rh_cfg c;
    sw_status st = resolve(ctx, p, &c);
    if (st != SW_OK)
        return st;
    sw_reich *r = (sw_reich *)calloc(1, sizeof *r);
    if (!r)
        return sw_fail(ctx, SW_ENOMEM, "reichenbach: out of memory for the plan");
    r->ctx = ctx;
    r->c = c;
    r->threads = ctx ? sw_context_threads(ctx) : 1;
    if (r->threads < 1)
        r->threads = 1;
    r->last_peaks = -1;

    size_t npix = (size_t)c.width * (size_t)c.height, nc = (size_t)c.ncells, ns = (size_t)c.nspots,
           nh = (size_t)c.height;
    r->vals = (float *)malloc(npix * sizeof(float));
    r->hmax = (float *)malloc(npix * sizeof(float));
    r->row_s = (double *)malloc(nh * sizeof(double));
    r->row_q = (double *)malloc(nh * sizeof(double));
    r->row_n = (int64_t *)malloc(nh * sizeof(int64_t));
    r->cell_pix = (int32_t *)malloc(nc * sizeof(int32_t));
    r->cell_x = (double *)malloc(nc * sizeof(double));
    r->cell_y = (double *)malloc(nc * sizeof(double));
    r->cell_s0 = (double *)malloc(nc * sizeof(double));
    r->taken = (uint8_t *)malloc(nc);
    r->claim = (uint64_t *)malloc(nc * sizeof(uint64_t));
    r->found = (uint8_t *)malloc(ns);
    r->peak_of = (int32_t *)malloc(ns * sizeof(int32_t));
    r->choice = (int32_t *)malloc(ns * sizeof(int32_t));
    r->key = (uint64_t *)malloc(ns * sizeof(uint64_t));
    r->fx = (double *)malloc(ns * sizeof(double));
    r->fy = (double *)malloc(ns * sizeof(double));
    if (!r->vals || !r->hmax || !r->row_s || !r->row_q || !r->row_n || !r->cell_pix || !r->cell_x ||
        !r->cell_y || !r->cell_s0 || !r->taken || !r->claim || !r->found || !r->peak_of ||
        !r->choice || !r->key || !r->fx || !r->fy) {
        sw_reich_destroy(r);
        return sw_fail(ctx, SW_ENOMEM, "reichenbach: out of memory for a %d x %d frame", c.width,
                       c.height);
    }
#ifdef SW_HAVE_CUDA
    if (ctx && sw_context_backend(ctx) == SW_BACKEND_CUDA) {
        st = sw_reich_gpu_create(ctx, &r->c, &r->gpu);
        if (st != SW_OK) {
            sw_reich_destroy(r);
            return st;
        }
    }
#endif
    *out = r;
    return SW_OK;
}

int64_t sw_reich_last_peaks(const sw_reich *r)
{
    if (!r)
        return -1;
#ifdef SW_HAVE_CUDA
    if (r->last_gpu && r->gpu)
        return sw_reich_gpu_last_peaks(r->ctx, r->gpu);
#endif
    return r->last_peaks;
}

/* ---------------------------------------------------------------- CPU run */

/* Row y of the frame as floats (exact for u8, u16, f32). */
static void load_row(const sw_image *f, int32_t y, float *out)
{
    const void *row = sw_image_row(f, y);
    int32_t w = f->width;
    if (f->type == SW_PIX_U8) {
        const uint8_t *p = (const uint8_t *)row;
        for (int32_t x = 0; x < w; ++x)
            out[x] = (float)p[x];
    } else if (f->type == SW_PIX_U16) {
        const uint16_t *p = (const uint16_t *)row;
        for (int32_t x = 0; x < w; ++x)
            out[x] = (float)p[x];
    } else {
        memcpy(out, row, (size_t)w * sizeof(float));
    }
}

/* A row's threshold sums in the order of search_reich.h (32 lanes, then the tree). */
static void row_sums(const float *v, int32_t w, double *s, double *q, int64_t *n)
{
    double ls[SW_RH_LANES], lq[SW_RH_LANES];
    int64_t cnt = 0;
    for (int t = 0; t < SW_RH_LANES; ++t) {
        double a = 0.0, b = 0.0;
        for (int32_t x = t; x < w; x += SW_RH_LANES) {
            double d = (double)v[x];
            if (isfinite(d)) {
                a = a + d;
                b = b + d * d;
                ++cnt;
            }
        }
        ls[t] = a;
        lq[t] = b;
    }
    for (int o = SW_RH_LANES / 2; o >= 1; o /= 2)
        for (int t = 0; t < o; ++t) {
            ls[t] = ls[t] + ls[t + o];
            lq[t] = lq[t] + lq[t + o];
        }
    *s = ls[0];
    *q = lq[0];
    *n = cnt;
}

/* The automatic threshold from the rows' sums (256 partials over rows, then the tree). */
static double frame_threshold(const sw_reich *r)
{
    double ps[SW_RH_PARTIALS], pq[SW_RH_PARTIALS];
    int64_t n = 0;
    for (int t = 0; t < SW_RH_PARTIALS; ++t) {
        double a = 0.0, b = 0.0;
        for (int32_t y = t; y < r->c.height; y += SW_RH_PARTIALS) {
            a = a + r->row_s[y];
            b = b + r->row_q[y];
            n += r->row_n[y];
        }
        ps[t] = a;
        pq[t] = b;
    }
    for (int o = SW_RH_PARTIALS / 2; o >= 1; o /= 2)
        for (int t = 0; t < o; ++t) {
            ps[t] = ps[t] + ps[t + o];
            pq[t] = pq[t] + pq[t + o];
        }
    return sw_rh_threshold(ps[0], pq[0], n);
}

/* Step 1: the peaks of the frame into the cells; returns their number. */
static int64_t find_peaks(sw_reich *r, const sw_image *f, double t)
{
    const sw_rh_cfg *c = &r->c;
    const int32_t w = c->width, hgt = c->height, h = c->half;
    const float *vals = r->vals;
    float *hmax = r->hmax;

    for (int64_t i = 0; i < c->ncells; ++i)
        r->cell_pix[i] = -1;

        /* The maximum over each pixel's row span [x - h, x + h] (the frame's edge clips it). */
#pragma omp parallel for schedule(static) num_threads(r->threads)
    for (int32_t y = 0; y < hgt; ++y) {
        const float *v = vals + (size_t)y * (size_t)w;
        float *m = hmax + (size_t)y * (size_t)w;
        for (int32_t x = 0; x < w; ++x) {
            int32_t a = x - h < 0 ? 0 : x - h, b = x + h > w - 1 ? w - 1 : x + h;
            float mx = -INFINITY;
            for (int32_t i = a; i <= b; ++i)
                mx = sw_rh_fmax(mx, v[i]);
            m[x] = mx;
        }
    }

    int64_t count = 0;
#pragma omp parallel for schedule(dynamic, 16) num_threads(r->threads) reduction(+ : count)
    for (int32_t y = 0; y < hgt; ++y) {
        const float *v = vals + (size_t)y * (size_t)w;
        int32_t y0 = y - h < 0 ? 0 : y - h, y1 = y + h > hgt - 1 ? hgt - 1 : y + h;
        for (int32_t x = 0; x < w; ++x) {
            float p = v[x];
            if (!((double)p > t))
                continue;
            float up = -INFINITY, down = -INFINITY, left = -INFINITY, right = -INFINITY;
            for (int32_t j = y0; j < y; ++j)
                up = sw_rh_fmax(up, hmax[(size_t)j * (size_t)w + (size_t)x]);
            for (int32_t j = y + 1; j <= y1; ++j)
                down = sw_rh_fmax(down, hmax[(size_t)j * (size_t)w + (size_t)x]);
            for (int32_t i = (x - h < 0 ? 0 : x - h); i < x; ++i)
                left = sw_rh_fmax(left, v[i]);
            for (int32_t i = x + 1; i <= (x + h > w - 1 ? w - 1 : x + h); ++i)
                right = sw_rh_fmax(right, v[i]);
            if (!sw_rh_is_peak(p, t, up, left, down, right))
                continue;
            double px, py, s0;
            int st = sw_sm_com_step_ex(f->data, f->stride, f->type, w, hgt, (double)x, (double)y,
                                       (double)c->box, &px, &py, &s0);
            if (st == SW_SM_STEP_NONFINITE || st == SW_SM_STEP_EMPTY)
                continue;
            int64_t cell = (int64_t)(y / c->cell) * c->mw + x / c->cell;
            r->cell_pix[cell] = y * w + x;
            r->cell_x[cell] = px;
            r->cell_y[cell] = py;
            r->cell_s0[cell] = s0;
            r->taken[cell] = 0;
            r->claim[cell] = SW_RH_NO_KEY;
            ++count;
        }
    }
    return count;
}

/* Step 2: the seed spot (-1 when no spot is searchable). */
static int32_t seed_spot(const sw_rh_cfg *c, const double *sx, const double *sy,
                         const uint8_t *active)
{
    double ax[SW_RH_PARTIALS], ay[SW_RH_PARTIALS];
    int64_t n = 0;
    for (int t = 0; t < SW_RH_PARTIALS; ++t) {
        double a = 0.0, b = 0.0;
        for (int32_t k = t; k < c->nspots; k += SW_RH_PARTIALS)
            if (sw_rh_searchable(active, sx, sy, k)) {
                a = a + sx[k];
                b = b + sy[k];
                ++n;
            }
        ax[t] = a;
        ay[t] = b;
    }
    if (n == 0)
        return -1;
    for (int o = SW_RH_PARTIALS / 2; o >= 1; o /= 2)
        for (int t = 0; t < o; ++t) {
            ax[t] = ax[t] + ax[t + o];
            ay[t] = ay[t] + ay[t + o];
        }
    double mx = ax[0] / (double)n, my = ay[0] / (double)n;
    int32_t best = -1;
    double bd = 0.0;
    for (int32_t k = 0; k < c->nspots; ++k) {
        if (!sw_rh_searchable(active, sx, sy, k))
            continue;
        double d2 = sw_rh_d2(sx[k], sy[k], mx, my);
        if (best < 0 || d2 < bd) {
            best = k;
            bd = d2;
        }
    }
    return best;
}

/* Steps 2-3 for spot k in round rd: its prediction and its nearest free peak; writes choice[k]
 * and key[k] (choice -1 when the spot does not claim). */
static void choose(sw_reich *r, int32_t rd, int32_t seed, int32_t k, const double *sx,
                   const double *sy, const uint8_t *active)
{
    const sw_rh_cfg *c = &r->c;
    r->choice[k] = -1;
    if (!sw_rh_searchable(active, sx, sy, k))
        return;
    double px, py;
    if (rd == 0) {
        if (seed < 0)
            return;
        int32_t ix = k % c->nx, iy = k / c->nx, sxi = seed % c->nx, syi = seed / c->nx;
        if (abs(ix - sxi) > c->seed_half || abs(iy - syi) > c->seed_half)
            return;
        px = sx[k];
        py = sy[k];
    } else {
        if (r->found[k] || !sw_rh_predict(c, k, r->found, r->fx, r->fy, sx, sy, &px, &py))
            return;
    }
    int32_t cx0, cx1, cy0, cy1;
    if (!sw_rh_cells(c, px, py, &cx0, &cx1, &cy0, &cy1))
        return;
    int64_t best = -1, bpix = 0;
    double bd = 0.0;
    for (int32_t cy = cy0; cy <= cy1; ++cy)
        for (int32_t cx = cx0; cx <= cx1; ++cx) {
            int64_t cell = (int64_t)cy * c->mw + cx;
            int32_t pix = r->cell_pix[cell];
            if (pix < 0 || r->taken[cell])
                continue;
            double d2 = sw_rh_d2(r->cell_x[cell], r->cell_y[cell], px, py);
            if (!(d2 <= c->capture2))
                continue;
            if (best < 0 || sw_rh_before(d2, pix, bd, bpix)) {
                best = cell;
                bd = d2;
                bpix = pix;
            }
        }
    if (best < 0)
        return;
    r->choice[k] = (int32_t)best;
    r->key[k] = sw_rh_key(bd, k);
}

sw_status sw_reich_run_cpu(sw_reich *r, const sw_image *frame, const double *sx, const double *sy,
                           const uint8_t *active, double *x, double *y, double *intensity,
                           uint8_t *status)
{
    if (!r)
        return sw_fail(NULL, SW_EINVAL, "reichenbach: plan is NULL");
    const sw_rh_cfg *c = &r->c;
    if (!frame || !frame->data || frame->width != c->width || frame->height != c->height ||
        frame->type != c->type || frame->memory == SW_MEM_DEVICE ||
        frame->stride < (size_t)c->width * sw_pixel_size(c->type))
        return sw_fail(r->ctx, SW_EINVAL,
                       "reichenbach: the frame is not a host %s image of %d x %d pixels",
                       sw_pixel_type_string(c->type), c->width, c->height);
    if (!sx || !sy || !x || !y || !status)
        return sw_fail(r->ctx, SW_EINVAL, "reichenbach: a spot array is NULL");
    const int32_t hgt = c->height, w = c->width, ns = c->nspots;

    /* Step 1: the frame as floats, the threshold, the peaks. */
    int autot = c->threshold == 0.0;
#pragma omp parallel for schedule(static) num_threads(r->threads)
    for (int32_t j = 0; j < hgt; ++j) {
        float *v = r->vals + (size_t)j * (size_t)w;
        load_row(frame, j, v);
        if (autot)
            row_sums(v, w, &r->row_s[j], &r->row_q[j], &r->row_n[j]);
    }
    double t = autot ? frame_threshold(r) : c->threshold;
    r->last_peaks = find_peaks(r, frame, t);
    r->last_gpu = 0;

    /* Step 2: the seed; round 0 claims from the seed block, rounds 1.. grow (step 3). */
    int32_t seed = seed_spot(c, sx, sy, active);
    for (int32_t k = 0; k < ns; ++k) {
        r->found[k] = 0;
        r->peak_of[k] = -1;
        r->choice[k] = -1;
    }
    for (int32_t rd = 0; rd < c->rounds; ++rd) {
#pragma omp parallel for schedule(dynamic, 64) num_threads(r->threads)
        for (int32_t k = 0; k < ns; ++k)
            choose(r, rd, seed, k, sx, sy, active);
        for (int32_t k = 0; k < ns; ++k) {
            int32_t cell = r->choice[k];
            if (cell >= 0 && r->key[k] < r->claim[cell])
                r->claim[cell] = r->key[k];
        }
        int changed = 0;
        for (int32_t k = 0; k < ns; ++k) {
            int32_t cell = r->choice[k];
            if (cell < 0 || r->claim[cell] != r->key[k])
                continue;
            r->found[k] = 1;
            r->peak_of[k] = cell;
            r->fx[k] = r->cell_x[cell];
            r->fy[k] = r->cell_y[cell];
            r->taken[cell] = 1;
            changed = 1;
        }
        if (!changed)
            break;
    }

    /* The results. */
    for (int32_t k = 0; k < ns; ++k) {
        const uint8_t st = sw_rh_status(active, sx, sy, k, r->found[k]);
        const int ok = st == SW_SPOT_OK;
        x[k] = ok ? r->fx[k] : NAN;
        y[k] = ok ? r->fy[k] : NAN;
        if (intensity)
            intensity[k] = ok ? r->cell_s0[r->peak_of[k]] : NAN;
        status[k] = st;
    }
    return SW_OK;
}

#ifdef SW_HAVE_CUDA
sw_status sw_reich_run_gpu(sw_reich *r, const sw_image *frame, const double *sx, const double *sy,
                           const uint8_t *active, double *x, double *y, double *intensity,
                           uint8_t *status)
{
    if (!r)
        return sw_fail(NULL, SW_EINVAL, "reichenbach: plan is NULL");
    const sw_rh_cfg *c = &r->c;
    if (!r->gpu)
        return sw_fail(r->ctx, SW_EINVAL, "reichenbach: the plan was not made on a CUDA context");
    if (!frame || !frame->data || frame->width != c->width || frame->height != c->height ||
        frame->type != c->type || frame->memory != SW_MEM_DEVICE ||
        frame->stride < (size_t)c->width * sw_pixel_size(c->type))
        return sw_fail(r->ctx, SW_EINVAL,
                       "reichenbach: the frame is not a device %s image of %d x %d pixels",
                       sw_pixel_type_string(c->type), c->width, c->height);
    if (!sx || !sy || !x || !y || !status)
        return sw_fail(r->ctx, SW_EINVAL, "reichenbach: a spot array is NULL");
    sw_status st =
        sw_reich_gpu_run(r->ctx, c, r->gpu, frame, sx, sy, active, x, y, intensity, status);
    if (st == SW_OK)
        r->last_gpu = 1;
    return st;
}
#endif

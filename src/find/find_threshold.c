/*
 * The dispersion thresholds of the find stage on the CPU (find.h "DISPERSION" and
 * "DISPERSION_EXTENDED"; seed 003, with DIALS algorithms/image/threshold/local.h for what the
 * seed leaves out). The per-pixel value, validity and decisions are find_model.h's, shared with
 * the GPU (find_threshold_cuda.cu), so both backends decide every pixel identically.
 *
 * Window sums come from summed-area tables, as in DIALS (compute_sat): for the tables
 *     T[y][x] = sum over the pixels [0, x) x [0, y) that enter the sums
 * ((w + 1) x (h + 1) entries, row 0 and column 0 zero), the window [x0, x1] x [y0, y1] is
 *     T[y1+1][x1+1] - T[y0][x1+1] - T[y1+1][x0] + T[y0][x0].
 * A pixel enters the sums when it is valid and below 2^24 (DIALS's BIG). The tables are exact
 * integers: the count in int32 (at most 2^31 - 1 pixels in a frame), the sums of values and of
 * squared values in uint64. The totals of a large frame may pass 2^64 (2^31 pixels of up to
 * 2^48 squared), but unsigned arithmetic is exact modulo 2^64, so a window's difference of four
 * table entries is its exact sum as long as that sum is below 2^64: a window holds at most
 * (2 SW_FIND_MAX_KERNEL + 5)^2 = 1225 pixels (the extended background window is 2 wider) of
 * squares below 2^48, less than 2^59.
 *
 * The tables are built in two parallel sweeps: the rows' prefix sums (one row per task), then the
 * columns' prefix sums (blocks of adjacent columns per task, walking down the rows, so that every
 * task reads and writes whole cache lines). The decisions then run in parallel over rows.
 *
 * DISPERSION_EXTENDED (DIALS DispersionExtendedThreshold::threshold_w_gain):
 *   1. the tables over the valid pixels and the background test alone give D: a pixel is in D
 *      when it is dispersed or invalid (sw_fm_decide_extended_1: DIALS keeps masked pixels out
 *      of the background so that they do not erode);
 *   2. the Chebyshev distance of every pixel to the nearest pixel not in D, by DIALS's two-pass
 *      chamfer (filter/distance.h chebyshev_distance: a forward pass over the N, W, NW, NE
 *      neighbours and a backward pass over S, E, SW, SE, neighbours outside the image counting
 *      as max_distance = width + height, so the border of the image is not background). The core
 *      is C = { valid pixels in D at distance >= min(kx, ky) };
 *   3. the tables again, over the background B = valid pixels not in C (and below 2^24), counts
 *      and sums only, with half-sizes (kx + 2, ky + 2);
 *   4. sw_fm_decide_extended_2.
 * The chamfer passes run on one thread (each pixel needs its left and upper neighbours'
 * results); everything else is parallel.
 */
#include "find/find_internal.h"
#include "find/find_model.h"

#include <stdlib.h>
#include <string.h>

/* Bits of the per-pixel state array. */
enum {
    ST_VALID = 1, /* valid: the mask says so and sw_fm_value's valid                  */
    ST_SUM = 2,   /* valid and below 2^24: enters the window sums of step 1 / the basic */
    ST_DISP = 4,  /* extended step 1: in D (dispersed, or invalid)                     */
    ST_CORE = 8   /* extended step 2: in the core C                                    */
};

#define COL_BLOCK 256 /* columns per task in the column sweep of the tables */

typedef struct thr_cpu {
    int threads;
    size_t tw;       /* table row length: width + 1                         */
    int32_t *tm;     /* (w+1)(h+1): counts                                  */
    uint64_t *ts;    /* (w+1)(h+1): sums of values                          */
    uint64_t *tq;    /* (w+1)(h+1): sums of squared values; in the extended
                        algorithm, after step 1, it holds the int32 distance
                        map of step 2 (w * h entries fit in its bytes)     */
    uint32_t *value; /* w * h pixel values (sw_fm_value)                   */
    uint8_t *state;  /* w * h ST_* bits                                    */
} thr_cpu;

void sw_find_threshold_cpu_free(sw_find_plan *plan)
{
    thr_cpu *t = plan ? (thr_cpu *)plan->thr_cpu : NULL;
    if (!t)
        return;
    free(t->tm);
    free(t->ts);
    free(t->tq);
    free(t->value);
    free(t->state);
    free(t);
    plan->thr_cpu = NULL;
}

sw_status sw_find_threshold_cpu_init(sw_find_plan *plan)
{
    thr_cpu *t = calloc(1, sizeof(*t));
    if (!t)
        return sw_fail(plan->ctx, SW_ENOMEM, "find: out of memory");
    plan->thr_cpu = t;
    t->threads = sw_context_threads(plan->ctx);
    if (t->threads < 1)
        t->threads = 1;
    t->tw = (size_t)plan->width + 1;
    size_t n = (size_t)plan->npix, nt = t->tw * ((size_t)plan->height + 1);
    /* calloc: row 0 and column 0 of the tables stay zero for good (only [1..h][1..w] is ever
     * written). */
    t->tm = calloc(nt, sizeof(int32_t));
    t->ts = calloc(nt, sizeof(uint64_t));
    t->tq = calloc(nt, sizeof(uint64_t));
    t->value = malloc(n * sizeof(uint32_t));
    t->state = malloc(n);
    if (!t->tm || !t->ts || !t->tq || !t->value || !t->state) {
        sw_find_threshold_cpu_free(plan);
        return sw_fail(plan->ctx, SW_ENOMEM,
                       "find: out of memory for the summed-area tables of a %d x %d frame "
                       "(%.0f MB)",
                       plan->width, plan->height, (double)nt * 20.0 / 1e6 + (double)n * 5.0 / 1e6);
    }
    return SW_OK;
}

/* ---------------------------------------------------------------- tables */

/* Row y's values, validity and summability (plan mask, sw_fm_value, 2^24) into t->value and
 * t->state; returns the row's valid pixels. */
static int64_t load_row(const sw_find_plan *plan, thr_cpu *t, const sw_image *frame, int32_t y)
{
    const int32_t w = plan->width;
    const void *row = sw_image_row(frame, y);
    const uint8_t *mask = plan->mask ? plan->mask + (size_t)y * w : NULL;
    uint32_t *v = t->value + (size_t)y * w;
    uint8_t *st = t->state + (size_t)y * w;
    const sw_pixel_type type = plan->p.type;
    const double ovl = plan->overload;
    int64_t nvalid = 0;
    for (int32_t x = 0; x < w; ++x) {
        int ok;
        uint32_t val = sw_fm_value(row, x, type, ovl, &ok);
        ok = ok && (!mask || mask[x]);
        v[x] = val;
        st[x] = (uint8_t)(ok ? (ST_VALID | (sw_fm_summable(val) ? ST_SUM : 0)) : 0);
        nvalid += ok;
    }
    return nvalid;
}

/*
 * The summed-area tables of the pixels whose state has all bits of `need` and none of `veto`
 * (need holds ST_SUM: valid and below 2^24). with_q: also the squares. First every row's prefix
 * sums into table row y + 1, then the columns' prefix sums down the table.
 */
static void build_tables(const sw_find_plan *plan, thr_cpu *t, uint8_t need, uint8_t veto,
                         int with_q)
{
    const int32_t w = plan->width, h = plan->height;
    const size_t tw = t->tw;
    /* The extended algorithm keeps its distance map in the squares' table (erode), so that
     * table's row 0 and column 0 are zeroed again here rather than trusted from init. */
    if (with_q)
        memset(t->tq, 0, tw * sizeof(uint64_t));
#pragma omp parallel for schedule(static) num_threads(t->threads)
    for (int32_t y = 0; y < h; ++y) {
        if (with_q)
            t->tq[(size_t)(y + 1) * tw] = 0;
        const uint32_t *v = t->value + (size_t)y * w;
        const uint8_t *st = t->state + (size_t)y * w;
        int32_t *rm = t->tm + (size_t)(y + 1) * tw;
        uint64_t *rs = t->ts + (size_t)(y + 1) * tw;
        uint64_t *rq = t->tq + (size_t)(y + 1) * tw;
        int32_t m = 0;
        uint64_t s = 0, q = 0;
        for (int32_t x = 0; x < w; ++x) {
            if ((st[x] & need) == need && !(st[x] & veto)) {
                m += 1;
                s += v[x];
                q += (uint64_t)v[x] * v[x];
            }
            rm[x + 1] = m;
            rs[x + 1] = s;
            if (with_q)
                rq[x + 1] = q;
        }
    }
    const int32_t nblocks = (w + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(static) num_threads(t->threads)
    for (int32_t b = 0; b < nblocks; ++b) {
        const size_t x0 = 1 + (size_t)b * COL_BLOCK;
        const size_t x1 = x0 + COL_BLOCK < (size_t)w + 1 ? x0 + COL_BLOCK : (size_t)w + 1;
        for (int32_t y = 2; y <= h; ++y) {
            int32_t *rm = t->tm + (size_t)y * tw;
            uint64_t *rs = t->ts + (size_t)y * tw, *rq = t->tq + (size_t)y * tw;
            const int32_t *pm = rm - tw;
            const uint64_t *ps = rs - tw, *pq = rq - tw;
            for (size_t x = x0; x < x1; ++x) {
                rm[x] += pm[x];
                rs[x] += ps[x];
            }
            if (with_q)
                for (size_t x = x0; x < x1; ++x)
                    rq[x] += pq[x];
        }
    }
}

/* The window [x - kx, x + kx] x [y - ky, y + ky] clipped to the image, as table corners. */
typedef struct win {
    size_t a, b, c, d; /* T[y0][x0], T[y0][x1+1], T[y1+1][x0], T[y1+1][x1+1] */
} win;

static inline win window_at(const sw_find_plan *plan, size_t tw, int32_t x, int32_t y, int32_t kx,
                            int32_t ky)
{
    int32_t x0 = x - kx < 0 ? 0 : x - kx, x1 = x + kx >= plan->width ? plan->width - 1 : x + kx;
    int32_t y0 = y - ky < 0 ? 0 : y - ky, y1 = y + ky >= plan->height ? plan->height - 1 : y + ky;
    win r;
    r.a = (size_t)y0 * tw + (size_t)x0;
    r.b = (size_t)y0 * tw + (size_t)x1 + 1;
    r.c = (size_t)(y1 + 1) * tw + (size_t)x0;
    r.d = (size_t)(y1 + 1) * tw + (size_t)x1 + 1;
    return r;
}

static inline int32_t sum_m(const int32_t *t, win r)
{
    return t[r.d] - t[r.b] - t[r.c] + t[r.a];
}

/* Modulo 2^64: exact for any window (see the top of the file). */
static inline uint64_t sum_u(const uint64_t *t, win r)
{
    return t[r.d] - t[r.b] - t[r.c] + t[r.a];
}

static inline double gain_at(const sw_find_plan *plan, size_t i)
{
    return plan->uniform_gain ? plan->p.gain : (double)plan->gain_map[i];
}

/* ---------------------------------------------------------------- extended step 2 */

/*
 * DIALS's chebyshev_distance (filter/distance.h) of the pixels not in D ("value" false), then the
 * core C = valid pixels of D at distance >= min(kx, ky). The two passes are DIALS's chamfer; the
 * distance map lives in the bytes of the squares' table (not needed after step 1; w h int32 fit
 * in (w+1)(h+1) uint64). Allocated memory takes the type of its last store (C11 6.5p6), and every
 * entry is stored as int32 here before it is read as one, as build_tables stores the uint64
 * entries before they are read, so the two uses do not conflict.
 */
static void erode(const sw_find_plan *plan, thr_cpu *t)
{
    const int32_t w = plan->width, h = plan->height;
    const int32_t far = w + h; /* DIALS's max_distance: neighbours outside the image */
    int32_t *d = (int32_t *)(void *)t->tq;
    const uint8_t *st = t->state;

    /* Forward: north, west, north-west, north-east. */
    for (int32_t y = 0; y < h; ++y) {
        int32_t *dr = d + (size_t)y * w;
        const int32_t *up = dr - w;
        const uint8_t *sr = st + (size_t)y * w;
        for (int32_t x = 0; x < w; ++x) {
            if (!(sr[x] & ST_DISP)) {
                dr[x] = 0;
                continue;
            }
            int32_t n = y > 0 ? up[x] : far;
            int32_t wv = x > 0 ? dr[x - 1] : far;
            int32_t nw = (y > 0 && x > 0) ? up[x - 1] : far;
            int32_t ne = (y > 0 && x < w - 1) ? up[x + 1] : far;
            int32_t a = n < wv ? n : wv, b = nw < ne ? nw : ne;
            dr[x] = 1 + (a < b ? a : b);
        }
    }
    /* Backward: south, east, south-west, south-east. */
    for (int32_t y = h - 1; y >= 0; --y) {
        int32_t *dr = d + (size_t)y * w;
        const int32_t *dn = dr + w;
        for (int32_t x = w - 1; x >= 0; --x) {
            int32_t s = y < h - 1 ? dn[x] : far;
            int32_t e = x < w - 1 ? dr[x + 1] : far;
            int32_t sw = (y < h - 1 && x > 0) ? dn[x - 1] : far;
            int32_t se = (y < h - 1 && x < w - 1) ? dn[x + 1] : far;
            int32_t a = s < e ? s : e, b = sw < se ? sw : se;
            int32_t other = a < b ? a : b;
            if (other < dr[x])
                dr[x] = 1 + other;
        }
    }
    const int32_t reach = plan->p.kernel_x < plan->p.kernel_y ? plan->p.kernel_x : plan->p.kernel_y;
    const int64_t n = plan->npix;
#pragma omp parallel for schedule(static) num_threads(t->threads)
    for (int64_t i = 0; i < n; ++i) {
        uint8_t s = t->state[i];
        if ((s & ST_VALID) && (s & ST_DISP) && d[i] >= reach)
            t->state[i] = (uint8_t)(s | ST_CORE);
    }
}

/* ---------------------------------------------------------------- the threshold */

sw_status sw_find_threshold_cpu(sw_find_plan *plan, const sw_image *frame, uint8_t *strong,
                                int64_t *valid_count)
{
    thr_cpu *t = (thr_cpu *)plan->thr_cpu;
    if (!t)
        return sw_fail(plan->ctx, SW_EINTERNAL, "find: the CPU threshold was not initialised");
    if (frame->width != plan->width || frame->height != plan->height ||
        frame->type != plan->p.type || frame->memory == SW_MEM_DEVICE)
        return sw_fail(plan->ctx, SW_EINVAL, "find: the threshold needs a host %d x %d %s frame",
                       plan->width, plan->height, sw_pixel_type_string(plan->p.type));
    const int32_t w = plan->width, h = plan->height;
    const int32_t kx = plan->p.kernel_x, ky = plan->p.kernel_y;
    const int32_t min_count = plan->min_count;
    const double thr = plan->p.global_threshold;
    const double sb = plan->p.sigma_background, ss = plan->p.sigma_strong;
    const size_t tw = t->tw;
    const int extended = plan->p.algorithm == SW_FIND_DISPERSION_EXTENDED;

    int64_t nvalid = 0;
#pragma omp parallel for schedule(static) num_threads(t->threads) reduction(+ : nvalid)
    for (int32_t y = 0; y < h; ++y)
        nvalid += load_row(plan, t, frame, y);

    /* DISPERSION, or step 1 of DISPERSION_EXTENDED: sums over the valid pixels below 2^24. */
    build_tables(plan, t, ST_SUM, 0, 1);
#pragma omp parallel for schedule(static) num_threads(t->threads)
    for (int32_t y = 0; y < h; ++y) {
        for (int32_t x = 0; x < w; ++x) {
            size_t i = (size_t)y * w + (size_t)x;
            win r = window_at(plan, tw, x, y, kx, ky);
            int64_t m = sum_m(t->tm, r);
            uint64_t s = sum_u(t->ts, r), q = sum_u(t->tq, r);
            int valid = t->state[i] & ST_VALID;
            double g = gain_at(plan, i);
            if (!extended)
                strong[i] = (uint8_t)sw_fm_decide_dispersion(valid, t->value[i], m, s, q, g,
                                                             min_count, thr, sb, ss);
            else if (sw_fm_decide_extended_1(valid, m, s, q, g, min_count, sb))
                t->state[i] |= ST_DISP;
        }
    }

    if (extended) {
        erode(plan, t);
        /* Step 3: the background = valid, not core (and below 2^24), over the wider window. */
        build_tables(plan, t, ST_SUM, ST_CORE, 0);
#pragma omp parallel for schedule(static) num_threads(t->threads)
        for (int32_t y = 0; y < h; ++y) {
            for (int32_t x = 0; x < w; ++x) {
                size_t i = (size_t)y * w + (size_t)x;
                win r = window_at(plan, tw, x, y, kx + 2, ky + 2);
                uint8_t s = t->state[i];
                strong[i] = (uint8_t)sw_fm_decide_extended_2(
                    s & ST_VALID, (s & ST_CORE) != 0, t->value[i], sum_m(t->tm, r), sum_u(t->ts, r),
                    gain_at(plan, i), thr, ss);
            }
        }
    }
    if (valid_count)
        *valid_count = nvalid;
    return SW_OK;
}

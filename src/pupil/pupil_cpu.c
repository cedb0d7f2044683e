/*
 * The pupil tracker on the CPU (pupil.h steps 0-9; seed 001 Sec. 3.1, Fig. 3): the reference
 * the GPU twin (pupil_cuda.cu) is tested against. Every piece of arithmetic the two share comes
 * from pupil_model.h; this file only walks the pixels, rows and candidates in parallel
 * (OpenMP over rows, and over RANSAC candidates), in an order that does not change the results:
 * the per-pixel passes write each output once, the sums are integers, and the RANSAC winner is
 * the maximum of packed (votes, index) values, which does not depend on the order.
 *
 * Scratch: the frame-sized u8 buffer tmp8 is free outside steps 1 and 4, and holds there the
 * frame's row sums and counts (step 0, height doubles and height int64), the column sums of the
 * binocular split (step 2, width int64) and the per-row border counts (step 5, height int64): a
 * frame has at least 16 rows and 16 columns (SW_PUPIL_MIN_SIZE), so each fits in its width * height
 * bytes.
 */
#include "pupil/pupil_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- buffers */

sw_status sw_pupil_cpu_init(sw_pupil_plan *plan)
{
    const size_t n = (size_t)plan->npix;
    plan->img8 = malloc(n);
    plan->tmp8 = malloc(n);
    plan->smooth8 = malloc(n);
    plan->closed8 = malloc(n);
    int ok = plan->img8 && plan->tmp8 && plan->smooth8 && plan->closed8;
    /* The border lists only on a CPU plan: a GPU plan keeps its own on the device and reads
     * them back straight into the caller's buffer (sw_pupil_gpu_border). A region's border
     * pixels are at most its pixels, so one list of npix points holds both regions' lists:
     * region 0's from the start, region 1's after split x height points (set per frame). */
    if (ok && sw_context_backend(plan->ctx) == SW_BACKEND_CPU) {
        plan->border_xy[0] = malloc(2 * n * sizeof(int32_t));
        plan->border_xy[1] = plan->border_xy[0];
        ok = plan->border_xy[0] != NULL;
    }
    plan->border_n[0] = plan->border_n[1] = 0;
    if (!ok) {
        sw_pupil_cpu_free(plan);
        return sw_fail(plan->ctx, SW_ENOMEM, "pupil: out of memory for a %d x %d frame",
                       plan->p.width, plan->p.height);
    }
    return SW_OK;
}

void sw_pupil_cpu_free(sw_pupil_plan *plan)
{
    if (!plan)
        return;
    free(plan->img8);
    free(plan->tmp8);
    free(plan->smooth8);
    free(plan->closed8);
    free(plan->border_xy[0]); /* border_xy[1] points into the same list */
    plan->img8 = plan->tmp8 = plan->smooth8 = plan->closed8 = NULL;
    plan->border_xy[0] = plan->border_xy[1] = NULL;
}

static inline int32_t clamp_i32(int32_t v, int32_t lo, int32_t hi)
{
    return v < lo ? lo : (v > hi ? hi : v);
}

/* ---------------------------------------------------------------- step 1: Gaussian */

static void gauss_impl(const uint8_t *in, uint8_t *tmp, uint8_t *out, int32_t width, int32_t height,
                       int32_t radius, const uint32_t *w, int threads)
{
    const int32_t r = radius, taps = 2 * radius + 1;
    (void)threads;
    /* rows: in -> tmp, pixels beyond the row's ends repeat the end pixel */
#ifdef SW_HAVE_OPENMP
#pragma omp parallel for schedule(static) num_threads(threads)
#endif
    for (int32_t y = 0; y < height; y++) {
        const uint8_t *s = in + (size_t)y * (size_t)width;
        uint8_t *d = tmp + (size_t)y * (size_t)width;
        for (int32_t x = 0; x < width; x++) {
            uint32_t acc = 0;
            if (x >= r && x + r < width) {
                const uint8_t *sp = s + (x - r);
                for (int32_t k = 0; k < taps; k++)
                    acc += w[k] * (uint32_t)sp[k];
            } else {
                for (int32_t k = 0; k < taps; k++)
                    acc += w[k] * (uint32_t)s[clamp_i32(x - r + k, 0, width - 1)];
            }
            d[x] = sw_pm_gauss_finish(acc);
        }
    }
    /* columns: tmp -> out, rows beyond the image repeat the edge row */
#ifdef SW_HAVE_OPENMP
#pragma omp parallel for schedule(static) num_threads(threads)
#endif
    for (int32_t y = 0; y < height; y++) {
        const uint8_t *rows[SW_PUPIL_MAX_TAPS];
        for (int32_t k = 0; k < taps; k++)
            rows[k] = tmp + (size_t)clamp_i32(y - r + k, 0, height - 1) * (size_t)width;
        uint8_t *d = out + (size_t)y * (size_t)width;
        for (int32_t x = 0; x < width; x++) {
            uint32_t acc = 0;
            for (int32_t k = 0; k < taps; k++)
                acc += w[k] * (uint32_t)rows[k][x];
            d[x] = sw_pm_gauss_finish(acc);
        }
    }
}

void sw_pupil_cpu_gauss(const uint8_t *in, uint8_t *tmp, uint8_t *out, int32_t width,
                        int32_t height, int32_t radius, const uint32_t *w)
{
    gauss_impl(in, tmp, out, width, height, radius, w, 1);
}

/* ---------------------------------------------------------------- steps 3-4: threshold, close */

/* One row of a binary dilation (is_max) or erosion over columns [x0, x1): d[x] = the maximum
 * (minimum) of s[x - r .. x + r] clipped to the region. Values are 0 / 1: max = or, min = and. */
static void row_pass(const uint8_t *s, uint8_t *d, int32_t x0, int32_t x1, int32_t r, int is_max)
{
    for (int32_t x = x0; x < x1; x++)
        d[x] = s[x];
    for (int32_t k = 1; k <= r; k++) {
        if (is_max) {
            for (int32_t x = x0; x < x1 - k; x++)
                d[x] |= s[x + k];
            for (int32_t x = x0 + k; x < x1; x++)
                d[x] |= s[x - k];
        } else {
            for (int32_t x = x0; x < x1 - k; x++)
                d[x] &= s[x + k];
            for (int32_t x = x0 + k; x < x1; x++)
                d[x] &= s[x - k];
        }
    }
}

/* The same along columns: row y of d from rows y - r .. y + r of s clipped to the image. */
static void col_pass(const uint8_t *s, uint8_t *d, int32_t width, int32_t height, int32_t y,
                     int32_t x0, int32_t x1, int32_t r, int is_max)
{
    const int32_t lo = y - r < 0 ? 0 : y - r, hi = y + r > height - 1 ? height - 1 : y + r;
    uint8_t *dr = d + (size_t)y * (size_t)width;
    const uint8_t *sr = s + (size_t)lo * (size_t)width;
    for (int32_t x = x0; x < x1; x++)
        dr[x] = sr[x];
    for (int32_t yy = lo + 1; yy <= hi; yy++) {
        sr = s + (size_t)yy * (size_t)width;
        if (is_max)
            for (int32_t x = x0; x < x1; x++)
                dr[x] |= sr[x];
        else
            for (int32_t x = x0; x < x1; x++)
                dr[x] &= sr[x];
    }
}

static void close_impl(const uint8_t *smooth, uint8_t *tmp, uint8_t *out, int32_t width,
                       int32_t height, int32_t x0, int32_t x1, int32_t t, int32_t radius,
                       int threads)
{
    (void)threads;
    /* step 3: inside = smooth > t (into out) */
#ifdef SW_HAVE_OPENMP
#pragma omp parallel for schedule(static) num_threads(threads)
#endif
    for (int32_t y = 0; y < height; y++) {
        const uint8_t *s = smooth + (size_t)y * (size_t)width;
        uint8_t *d = out + (size_t)y * (size_t)width;
        for (int32_t x = x0; x < x1; x++)
            d[x] = (int32_t)s[x] > t;
    }
    if (radius <= 0)
        return;
    /* step 4: dilation (rows out -> tmp, columns tmp -> out), then erosion likewise */
    for (int pass = 0; pass < 2; pass++) {
        const int is_max = pass == 0;
#ifdef SW_HAVE_OPENMP
#pragma omp parallel for schedule(static) num_threads(threads)
#endif
        for (int32_t y = 0; y < height; y++)
            row_pass(out + (size_t)y * (size_t)width, tmp + (size_t)y * (size_t)width, x0, x1,
                     radius, is_max);
#ifdef SW_HAVE_OPENMP
#pragma omp parallel for schedule(static) num_threads(threads)
#endif
        for (int32_t y = 0; y < height; y++)
            col_pass(tmp, out, width, height, y, x0, x1, radius, is_max);
    }
}

void sw_pupil_cpu_close(const uint8_t *smooth, uint8_t *tmp, uint8_t *out, int32_t width,
                        int32_t height, int32_t x0, int32_t x1, int32_t t, int32_t radius)
{
    close_impl(smooth, tmp, out, width, height, x0, x1, t, radius, 1);
}

/* ---------------------------------------------------------------- step 5: border */

/* Inside pixel (x, y) has an outside 8-neighbour within the region and the image. */
static inline int has_outside_neighbour(const uint8_t *closed, int32_t width, int32_t height,
                                        int32_t x0, int32_t x1, int32_t x, int32_t y)
{
    for (int32_t dy = -1; dy <= 1; dy++) {
        const int32_t yy = y + dy;
        if (yy < 0 || yy >= height)
            continue;
        const uint8_t *row = closed + (size_t)yy * (size_t)width;
        for (int32_t dx = -1; dx <= 1; dx++) {
            const int32_t xx = x + dx;
            if ((dx == 0 && dy == 0) || xx < x0 || xx >= x1)
                continue;
            if (!row[xx])
                return 1;
        }
    }
    return 0;
}

/* The border pixels of row y in [x0, x1), left to right, into xy (x, y pairs) when xy is not
 * NULL (sw_pupil_cpu_border accepts NULL too: it then only counts); returns their number. */
static int64_t border_row(const uint8_t *closed, int32_t width, int32_t height, int32_t x0,
                          int32_t x1, int32_t y, int32_t *xy)
{
    const uint8_t *row = closed + (size_t)y * (size_t)width;
    int64_t n = 0;
    for (int32_t x = x0; x < x1; x++) {
        if (!row[x] || !has_outside_neighbour(closed, width, height, x0, x1, x, y))
            continue;
        if (xy) {
            xy[2 * n] = x;
            xy[2 * n + 1] = y;
        }
        n++;
    }
    return n;
}

int64_t sw_pupil_cpu_border(const uint8_t *closed, int32_t width, int32_t height, int32_t x0,
                            int32_t x1, int32_t *xy)
{
    int64_t n = 0;
    for (int32_t y = 0; y < height; y++)
        n += border_row(closed, width, height, x0, x1, y, xy ? xy + 2 * n : NULL);
    return n;
}

/* The same in parallel: per-row counts (into counts, height int64), their prefix sums, then
 * every row writes its pixels at its offset: the same list in the same raster order. */
static int64_t border_par(const uint8_t *closed, int32_t width, int32_t height, int32_t x0,
                          int32_t x1, int32_t *xy, int64_t *counts, int threads)
{
    (void)threads;
#ifdef SW_HAVE_OPENMP
#pragma omp parallel for schedule(static) num_threads(threads)
#endif
    for (int32_t y = 0; y < height; y++)
        counts[y] = border_row(closed, width, height, x0, x1, y, NULL);
    int64_t n = 0;
    for (int32_t y = 0; y < height; y++) {
        const int64_t c = counts[y];
        counts[y] = n;
        n += c;
    }
#ifdef SW_HAVE_OPENMP
#pragma omp parallel for schedule(static) num_threads(threads)
#endif
    for (int32_t y = 0; y < height; y++)
        border_row(closed, width, height, x0, x1, y, xy + 2 * counts[y]);
    return n;
}

/* ---------------------------------------------------------------- step 2: binocular split */

/* The column sums of a smoothed frame (width int64), blocks of columns per task. */
static void column_sums(const uint8_t *smooth, int32_t width, int32_t height, int64_t *col,
                        int threads)
{
    enum { BLOCK = 256 };
    const int32_t nblocks = (width + BLOCK - 1) / BLOCK;
    (void)threads;
#ifdef SW_HAVE_OPENMP
#pragma omp parallel for schedule(static) num_threads(threads)
#endif
    for (int32_t b = 0; b < nblocks; b++) {
        const int32_t c0 = b * BLOCK, c1 = c0 + BLOCK < width ? c0 + BLOCK : width;
        for (int32_t c = c0; c < c1; c++)
            col[c] = 0;
        for (int32_t y = 0; y < height; y++) {
            const uint8_t *row = smooth + (size_t)y * (size_t)width;
            for (int32_t c = c0; c < c1; c++)
                col[c] += row[c];
        }
    }
}

/* pupil.h "Binocular split": P(x) = the column sums over x - h .. x + h (clipped to the image),
 * h = max(4, width / 64); the x in [width / 4, 3 width / 4) with the smallest P, the one nearest
 * width / 2 on ties (distance |2 x - width|, i.e. to the real width / 2), then the smaller. */
static int32_t split_from_columns(const int64_t *col, int32_t width)
{
    const int32_t h = width / 64 > 4 ? width / 64 : 4;
    int32_t best_x = -1;
    int64_t best_p = 0, best_d = 0;
    for (int32_t x = width / 4; x < (3 * width) / 4; x++) {
        const int32_t lo = x - h < 0 ? 0 : x - h, hi = x + h > width - 1 ? width - 1 : x + h;
        int64_t p = 0;
        for (int32_t c = lo; c <= hi; c++)
            p += col[c];
        const int64_t d = llabs(2 * (int64_t)x - width);
        if (best_x < 0 || p < best_p || (p == best_p && d < best_d)) {
            best_x = x;
            best_p = p;
            best_d = d;
        }
    }
    return best_x;
}

int32_t sw_pupil_cpu_split(const uint8_t *smooth, int32_t width, int32_t height)
{
    int64_t *col = malloc((size_t)width * sizeof(int64_t));
    if (col) {
        column_sums(smooth, width, height, col, 1);
        const int32_t x = split_from_columns(col, width);
        free(col);
        return x;
    }
    /* out of memory for width numbers: the same column sums, one column at a time */
    const int32_t h = width / 64 > 4 ? width / 64 : 4;
    int32_t best_x = -1;
    int64_t best_p = 0, best_d = 0;
    for (int32_t x = width / 4; x < (3 * width) / 4; x++) {
        const int32_t lo = x - h < 0 ? 0 : x - h, hi = x + h > width - 1 ? width - 1 : x + h;
        int64_t p = 0;
        for (int32_t y = 0; y < height; y++)
            for (int32_t c = lo; c <= hi; c++)
                p += smooth[(size_t)y * (size_t)width + (size_t)c];
        const int64_t d = llabs(2 * (int64_t)x - width);
        if (best_x < 0 || p < best_p || (p == best_p && d < best_d)) {
            best_x = x;
            best_p = p;
            best_d = d;
        }
    }
    return best_x;
}

/* ---------------------------------------------------------------- steps 6-9: the ellipse */

/* A pupil not found: the reason, NaN geometry (nothing fabricated, pupil.h step 9). */
static void set_failed(sw_pupil_ellipse *o, sw_pupil_failure f)
{
    o->valid = 0;
    o->failure = f;
    o->cx_px = o->cy_px = o->a_px = o->b_px = o->angle_deg = NAN;
}

/* pupil_model.h "Steps 6-9 in one place". */
static void fit_impl(const sw_pupil_plan *plan, const sw_pm_region *r, const int32_t *xy, int64_t n,
                     sw_pupil_ellipse *out, int threads)
{
    const sw_pupil_params *p = &plan->p;
    out->candidate = -1;
    out->votes = 0;
    out->inliers = 0;
    out->near = 0;
    if (n < 5) {
        set_failed(out, SW_PUPIL_FEW_BORDER);
        return;
    }
    /* step 6: RANSAC; each candidate's votes are independent, the winner the largest packed
     * (votes, index) value */
    const int32_t K = p->candidates;
    const float tol2 = r->tol2;
    unsigned long long best = 0;
    (void)threads;
#ifdef SW_HAVE_OPENMP
#pragma omp parallel for schedule(dynamic, 8) num_threads(threads) reduction(max : best)
#endif
    for (int32_t k = 0; k < K; k++) {
        double c[6];
        float cf[6];
        if (!sw_pm_candidate(r, xy, n, plan->randoms + (size_t)k * 5, p->min_radius_px,
                             p->max_radius_px, c, cf))
            continue;
        int32_t votes = 0;
        for (int64_t i = 0; i < n; i++)
            votes += sw_pm_vote(cf, sw_pm_uf(r, xy[2 * i]), sw_pm_vf(r, xy[2 * i + 1]), tol2);
        const unsigned long long pk = sw_pm_pack_vote(votes, k);
        if (pk > best)
            best = pk;
    }
    if (best == 0) {
        set_failed(out, SW_PUPIL_NO_ELLIPSE);
        return;
    }
    const int32_t k = sw_pm_packed_index(best);
    out->candidate = k;
    out->votes = sw_pm_packed_votes(best);
    double c[6];
    float cf[6];
    sw_pm_candidate(r, xy, n, plan->randoms + (size_t)k * 5, p->min_radius_px, p->max_radius_px, c,
                    cf);

    /* step 7: Sampson's iteration from the winner, stopping early (and keeping c) when the
     * normal equations are singular or their conic is not an ellipse */
    for (int32_t it = 0; it < p->refine_iterations; it++) {
        double acc[SW_PM_NACC] = {0};
        for (int64_t i = 0; i < n; i++)
            sw_pm_refine_add(c, sw_pm_u(r, xy[2 * i]), sw_pm_v(r, xy[2 * i + 1]), r->tol2d, acc);
        double cn[6], uc, vc, ra, rb;
        if (!sw_pm_refine_solve(acc, cn) || !sw_pm_conic_axes(cn, &uc, &vc, &ra, &rb))
            break;
        memcpy(c, cn, sizeof c);
    }

    /* steps 8-9: the final inliers and near-band points, the ellipse (+ the half-pixel edge
     * offset), the verdict */
    int32_t inliers = 0, near = 0;
    for (int64_t i = 0; i < n; i++) {
        const int band = sw_pm_band(c, sw_pm_u(r, xy[2 * i]), sw_pm_v(r, xy[2 * i + 1]), r->tol2d);
        inliers += band == 1;
        near += band == 2;
    }
    out->inliers = inliers;
    out->near = near;
    const int ok = sw_pm_ellipse_out(r, c, out);
    sw_pm_verdict(out, ok, p->min_radius_px, p->max_radius_px, p->min_coverage, p->max_near_ratio);
}

void sw_pupil_cpu_fit(const sw_pupil_plan *plan, const sw_pm_region *r, const int32_t *xy,
                      int64_t n, sw_pupil_ellipse *out)
{
    fit_impl(plan, r, xy, n, out, sw_context_threads(plan->ctx));
}

/* ---------------------------------------------------------------- step 3d: the edge level */

/* The histograms of the bands about pupil o of region [x0, x1) (pupil_model.h "Step 3d") into
 * h (3 x 256): the pixels of sw_pm_ring_box in a band; 0 when the pupil is too small for them
 * (h then all 0). */
static int ring_hist(const sw_pupil_plan *plan, int32_t x0, int32_t x1, const sw_pupil_ellipse *o,
                     sw_pm_ring *g, unsigned int *h, int threads)
{
    const sw_pupil_params *p = &plan->p;
    *g = sw_pm_ring_of(o, p->gauss_radius, p->gauss_sigma);
    memset(h, 0, 3 * 256 * sizeof *h);
    if (!g->usable)
        return 0;
    int32_t c0, c1, y0, y1;
    sw_pm_ring_box(o, g, x0, x1, p->height, &c0, &c1, &y0, &y1);
    const uint8_t *sm = plan->smooth8;
    const int32_t width = p->width;
    (void)threads;
#ifdef SW_HAVE_OPENMP
#pragma omp parallel for schedule(static) num_threads(threads) reduction(+ : h[:768])
#endif
    for (int32_t y = y0; y <= y1; y++) {
        const uint8_t *row = sm + (size_t)y * (size_t)width;
        for (int32_t x = c0; x <= c1; x++) {
            const int k = sw_pm_ring_band(g, x, y);
            if (k >= 0)
                h[k * 256 + row[x]]++;
        }
    }
    return 1;
}

/* ---------------------------------------------------------------- the whole chain */

sw_status sw_pupil_cpu_run(sw_pupil_plan *plan, const sw_image *frame, sw_pupil_result *result)
{
    const sw_pupil_params *p = &plan->p;
    const int32_t width = p->width, height = p->height;
    const int threads = sw_context_threads(plan->ctx);
    const sw_pixel_type type = p->type;

    /* step 0: the scale (automatic: 128 / the mean of the pixels above the frame's mean, both
     * summed in pupil_model.h's fixed order) and the 8-bit image */
    double scale = p->input_scale;
    if (!(scale > 0.0)) {
        /* height doubles and height int64 (see the top) */
        double *row_sums = (double *)(void *)plan->tmp8;
        int64_t *row_counts = (int64_t *)(void *)(plan->tmp8 + (size_t)height * sizeof(double));
        double level = -INFINITY; /* pass 1: every finite pixel */
        for (int pass = 0; pass < 2; pass++) {
#ifdef SW_HAVE_OPENMP
#pragma omp parallel for schedule(static) num_threads(threads)
#endif
            for (int32_t y = 0; y < height; y++)
                row_sums[y] =
                    sw_pm_row_sum_host(sw_image_row(frame, y), width, type, level, &row_counts[y]);
            const double total = sw_pm_total_host(row_sums, height);
            if (pass == 0) {
                level = sw_pm_frame_mean(total, plan->npix);
                if (level == 0.0) { /* empty frame */
                    scale = 0.0;
                    break;
                }
            } else {
                int64_t count = 0;
                for (int32_t y = 0; y < height; y++)
                    count += row_counts[y];
                scale = sw_pm_scale_above(level, total, count);
            }
        }
    }
    uint8_t *img8 = plan->img8;
#ifdef SW_HAVE_OPENMP
#pragma omp parallel for schedule(static) num_threads(threads)
#endif
    for (int32_t y = 0; y < height; y++) {
        const void *row = sw_image_row(frame, y);
        uint8_t *d = img8 + (size_t)y * (size_t)width;
        for (int32_t x = 0; x < width; x++)
            d[x] = sw_pm_to_u8(sw_pm_pixel(row, x, type), scale);
    }

    /* step 1 */
    gauss_impl(plan->img8, plan->tmp8, plan->smooth8, width, height, p->gauss_radius, plan->gauss_w,
               threads);

    /* step 2: the regions */
    int32_t split = width;
    if (p->n_pupils == 2) {
        if (p->split_x >= 0) {
            split = p->split_x;
        } else {
            int64_t *col = (int64_t *)(void *)plan->tmp8; /* width int64 (see the top) */
            column_sums(plan->smooth8, width, height, col, threads);
            split = split_from_columns(col, width);
        }
    }

    memset(result, 0, sizeof *result);
    result->n_pupils = p->n_pupils;
    result->scale = scale;
    result->split_x = split;
    plan->border_xy[1] = plan->border_xy[0] + 2 * (size_t)split * (size_t)height;
    for (int32_t i = 0; i < p->n_pupils; i++) {
        sw_pupil_ellipse *o = &result->pupil[i];
        const int32_t x0 = i == 0 ? 0 : split, x1 = i == 0 ? split : width;
        o->x0 = x0;
        o->x1 = x1;
        plan->recheck[i] = SW_PUPIL_OK;

        /* step 3: Otsu's threshold of the region's smoothed histogram */
        int64_t hist[256];
        memset(hist, 0, sizeof hist);
        const uint8_t *sm = plan->smooth8;
#ifdef SW_HAVE_OPENMP
#pragma omp parallel for schedule(static) num_threads(threads) reduction(+ : hist[:256])
#endif
        for (int32_t y = 0; y < height; y++) {
            const uint8_t *row = sm + (size_t)y * (size_t)width;
            for (int32_t x = x0; x < x1; x++)
                hist[row[x]]++;
        }
        const int auto_edge = p->edge_level < 0.0;
        const int32_t t_o = sw_pm_split(hist, p->otsu_classes);
        const int32_t t =
            sw_pm_edge_threshold(hist, t_o, auto_edge ? SW_PM_EDGE_AUTO_INIT : p->edge_level);
        int32_t retry_thr[SW_PM_AUTO_RETRIES];
        sw_pm_auto_retry_thresholds(hist, t_o, retry_thr);
        o->threshold = t;

        int64_t n = 0;
        if (t < 0) {
            /* no threshold: nothing is inside */
            for (int32_t y = 0; y < height; y++)
                memset(plan->closed8 + (size_t)y * (size_t)width + (size_t)x0, 0,
                       (size_t)(x1 - x0));
            o->candidate = -1;
            set_failed(o, SW_PUPIL_NO_CONTRAST);
        } else {
            /* steps 4-5 */
            close_impl(plan->smooth8, plan->tmp8, plan->closed8, width, height, x0, x1, t,
                       p->close_radius, threads);
            n = border_par(plan->closed8, width, height, x0, x1, plan->border_xy[i],
                           (int64_t *)(void *)plan->tmp8, threads);
            /* steps 6-9 */
            const sw_pm_region r = sw_pm_region_make(x0, x1, height, p->inlier_px);
            fit_impl(plan, &r, plan->border_xy[i], n, o, threads);
            /* step 3d (automatic edge level; pupil_model.h's sw_pm_auto course, as the GPU's
             * passes): a first fit that fails is tried again at lower levels (none finding
             * the pupil: the first fit's stays); then the threshold at the half height of the
             * found edge, steps 4-9 again, until it stays; a refit that fails keeps the last
             * pupil */
            sw_pm_auto au = sw_pm_auto_start(auto_edge && scale != 0.0, o->valid, t,
                                             sw_pm_auto_retries_for(o, retry_thr));
            au.first_failure = (int32_t)o->failure;
            if (au.retrying) {
                const sw_pupil_ellipse first = *o;
                while (au.retrying) {
                    close_impl(plan->smooth8, plan->tmp8, plan->closed8, width, height, x0, x1,
                               au.thr, p->close_radius, threads);
                    n = border_par(plan->closed8, width, height, x0, x1, plan->border_xy[i],
                                   (int64_t *)(void *)plan->tmp8, threads);
                    fit_impl(plan, &r, plan->border_xy[i], n, o, threads);
                    o->threshold = au.thr;
                    if (sw_pm_auto_retried(&au, sw_pm_auto_found(&au, o, p->max_near_ratio))) {
                        /* back to the first fit, its mask and border list */
                        *o = first;
                        close_impl(plan->smooth8, plan->tmp8, plan->closed8, width, height, x0, x1,
                                   au.thr, p->close_radius, threads);
                        n = border_par(plan->closed8, width, height, x0, x1, plan->border_xy[i],
                                       (int64_t *)(void *)plan->tmp8, threads);
                    }
                }
            }
            while (sw_pm_auto_more(&au)) {
                unsigned int h[768];
                sw_pm_ring g;
                const int usable = ring_hist(plan, x0, x1, o, &g, h, threads);
                if (!sw_pm_auto_measure(&au, usable, h, g.extrap))
                    break;
                const sw_pupil_ellipse prev = *o;
                close_impl(plan->smooth8, plan->tmp8, plan->closed8, width, height, x0, x1, au.thr,
                           p->close_radius, threads);
                n = border_par(plan->closed8, width, height, x0, x1, plan->border_xy[i],
                               (int64_t *)(void *)plan->tmp8, threads);
                fit_impl(plan, &r, plan->border_xy[i], n, o, threads);
                o->threshold = au.thr;
                if (sw_pm_auto_refit(&au, sw_pm_auto_found(&au, o, p->max_near_ratio))) {
                    /* back to the last pupil found, and its mask and border list */
                    *o = prev;
                    close_impl(plan->smooth8, plan->tmp8, plan->closed8, width, height, x0, x1,
                               au.thr, p->close_radius, threads);
                    n = border_par(plan->closed8, width, height, x0, x1, plan->border_xy[i],
                                   (int64_t *)(void *)plan->tmp8, threads);
                }
            }
            plan->recheck[i] = sw_pm_auto_recheck(&au);
        }
        plan->border_n[i] = n;
        o->border = (int32_t)n;
        if (scale == 0.0) {
            /* an empty frame (step 0): nothing to track, whatever the steps made of zeros */
            o->threshold = -1;
            o->candidate = -1;
            o->votes = 0;
            o->inliers = 0;
            o->near = 0;
            set_failed(o, SW_PUPIL_EMPTY_FRAME);
        }
    }

    /* pupils the glow path did not find: the spots path (pupil.h S1-S6, pupil_spots.c) */
    sw_status st = sw_pupil_spots_fallback(plan, frame, result);
    if (st != SW_OK)
        return st;

    /* the lenslet mask (pupil.h "Lenslet mask") */
    if (plan->has_geom) {
        const sw_sh_geometry *g = &plan->geom;
        const int32_t nx = g->nx, ny = g->ny;
        uint8_t *mask = plan->lenslet_mask;
        const sw_pupil_ellipse *pupils = result->pupil;
        const int32_t np = result->n_pupils;
        const sw_pupil_lenslet_rule rule = p->lenslet_rule;
#ifdef SW_HAVE_OPENMP
#pragma omp parallel for schedule(static) num_threads(threads)
#endif
        for (int32_t iy = 0; iy < ny; iy++)
            for (int32_t ix = 0; ix < nx; ix++)
                mask[(size_t)iy * (size_t)nx + (size_t)ix] =
                    sw_pm_lenslet_value(g, ix, iy, pupils, np, rule);
    }

    plan->last = *result;
    plan->have_frame = 1;
    return SW_OK;
}

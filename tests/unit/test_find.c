/*
 * End-to-end tests of the find stage on the CPU (find.h; seed 003, DIALS dispersion spot finding):
 * planted stars from the simulator (sim.h) found at their positions with centroid errors that
 * match the reported variances, pure Poisson backgrounds that give no spots, sw_find_run against
 * sw_find_sequence, 3-D joining across frames, the sequence's callbacks (a failing reader, the
 * strong masks, progress), the spot filters and their counters, max_strong_fraction, bad input,
 * NaN pixels in f32 frames against a mask, pixel types and gain maps, the strong mask against the
 * spots (an independent flood fill) and against a brute-force evaluation of the thresholds of
 * find.h, plans that keep nothing from one frame to the next, and thread-count independence.
 */
#include "find_testutil.h"
#include "testutil.h"

#include "spotwave/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PI 3.14159265358979323846

static sw_context *cpu;

static int setup(void **state)
{
    (void)state;
    cpu = sw_test_cpu_context(2);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sw_context_destroy(cpu);
    return 0;
}

/* ---------------------------------------------------------------- helpers */

static sw_image alloc_img(int32_t w, int32_t h, sw_pixel_type t)
{
    sw_image img;
    if (sw_image_alloc(cpu, w, h, t, &img) != SW_OK)
        fail_msg("sw_image_alloc: %s", sw_context_error(cpu));
    return img;
}

static void fill(sw_image *img, double v)
{
    for (int32_t y = 0; y < img->height; y++)
        for (int32_t x = 0; x < img->width; x++)
            set_px(img, x, y, v);
}

/*
 * A star field as the simulator makes it (seed 004): circular Gaussians of width sigma integrated
 * over the pixels, a sky of `sky` e-/px, Poisson noise, gain 1 e-/ADU, an image of type t.
 * stars may be NULL (background only).
 */
/* Stars over a Poisson sky (find_testutil.h star_frame_on), on the test's CPU context. */
static sw_image star_frame(int32_t w, int32_t h, const sw_stars *stars, double sigma, double sky,
                           uint64_t seed, sw_pixel_type t)
{
    return star_frame_on(cpu, w, h, stars, sigma, sky, seed, t);
}

/* One star list of n given stars. */
static sw_stars make_stars(int64_t n, const double *x, const double *y, const double *flux)
{
    sw_stars s;
    assert_int_equal(sw_stars_alloc(cpu, n, &s), SW_OK);
    for (int64_t i = 0; i < n; i++) {
        s.x[i] = x[i];
        s.y[i] = y[i];
        s.flux[i] = flux[i];
    }
    return s;
}

static sw_find_plan *make_plan(const sw_find_params *p)
{
    sw_find_plan *plan = NULL;
    if (sw_find_create(cpu, p, &plan) != SW_OK)
        fail_msg("sw_find_create: %s", sw_context_error(cpu));
    return plan;
}

static void find_one(sw_find_plan *plan, const sw_image *frame, int64_t z, sw_spot_list *spots,
                     sw_image *strong, sw_find_stats *stats)
{
    if (sw_find_run(plan, frame, z, spots, strong, stats) != SW_OK)
        fail_msg("sw_find_run: %s", sw_context_error(cpu));
}

/* The spots of one frame with params p (a plan made and destroyed here). */
static sw_spot_list find_frame(const sw_find_params *p, const sw_image *frame, sw_find_stats *stats)
{
    sw_spot_list l = {0};
    sw_find_plan *plan = make_plan(p);
    find_one(plan, frame, 0, &l, NULL, stats);
    sw_find_destroy(plan);
    return l;
}

/* Seed 004's signal-to-noise ratio of a star of flux F (e-) with a Gaussian PSF of width sigma
 * over a sky of b e-/px: the flux over the Poisson noise of the flux and of the sky in the PSF's
 * noise-equivalent area 4 pi sigma^2. */
static double snr(double flux, double sigma, double sky)
{
    return flux / sqrt(flux + 4.0 * PI * sigma * sigma * sky);
}

/* Index of the spot nearest (x, y) and its distance. */
static int64_t nearest_spot(const sw_spot_list *l, double x, double y, double *dist)
{
    int64_t best = -1;
    double bd = INFINITY;
    for (int64_t i = 0; i < l->count; i++) {
        double d = hypot(l->spots[i].x - x, l->spots[i].y - y);
        if (d < bd) {
            bd = d;
            best = i;
        }
    }
    *dist = bd;
    return best;
}

/* Distance from star i to the nearest other star. */
static double nearest_star(const sw_stars *s, int64_t i)
{
    double bd = INFINITY;
    for (int64_t k = 0; k < s->count; k++)
        if (k != i)
            bd = fmin(bd, hypot(s->x[k] - s->x[i], s->y[k] - s->y[i]));
    return bd;
}

/* Distance from star (x, y) to the edge of a w x h image (pixels span [-0.5, w - 0.5)). */
static double edge_distance(double x, double y, int32_t w, int32_t h)
{
    return fmin(fmin(x + 0.5, (double)w - 0.5 - x), fmin(y + 0.5, (double)h - 0.5 - y));
}

/* Two spots equal in every field. */
static void assert_spot_equal(const sw_spot *a, const sw_spot *b)
{
    if (memcmp(a, b, sizeof *a) != 0)
        fail_msg("spots differ: (%.6f, %.6f, %.3f) I %.1f npix %lld vs (%.6f, %.6f, %.3f) I %.1f "
                 "npix %lld",
                 a->x, a->y, a->z, a->intensity, (long long)a->npix, b->x, b->y, b->z, b->intensity,
                 (long long)b->npix);
}

static void assert_lists_equal(const sw_spot_list *a, const sw_spot_list *b)
{
    assert_int_equal(a->count, b->count);
    for (int64_t i = 0; i < a->count; i++)
        assert_spot_equal(&a->spots[i], &b->spots[i]);
}

static const sw_find_algorithm ALGOS[2] = {SW_FIND_DISPERSION, SW_FIND_DISPERSION_EXTENDED};

/* ---------------------------------------------------------------- planted stars */

/*
 * The detection limit. Every star with SNR >= SNR_MIN (seed 004's F / sqrt(F + 4 pi sigma^2 b)),
 * at least EDGE_MIN px from the edge and ISOLATION px from any other star must have a spot within
 * MATCH_PX, for both algorithms. Why 20: the basic dispersion threshold asks for >= 3 connected
 * pixels that exceed the local 7 x 7 mean by sigma_s = 3 local standard deviations, and that mean
 * includes the star. At SNR 20 with sigma 1.5 px on a sky of 20 e-/px (F ~ 720 e-), the centre
 * pixel holds ~20 + F / (2 pi sigma^2) ~ 70 e- and its four neighbours ~60 e- each; the local
 * mean is ~20 + 0.9 F / 49 ~ 33 e-, so the threshold is ~33 + 3 sqrt(33) ~ 50 e-: the five
 * pixels clear it by 1.2 .. 2.5 pixel noise (~8 e-), so three of them are strong with high
 * probability. Fainter stars are lost more and more often: over 8 sets of these fields (other
 * seeds) the brightest star missed had SNR 17.6 (basic) and 14.7 (extended, whose background
 * leaves the star out).
 * ISOLATION: a bright star's strong pixels reach ~4-5 px from its centre, so two stars closer
 * than ~10 px can merge into one component whose centroid lies between them.
 */
#define SNR_MIN   20.0
#define EDGE_MIN  4.0
#define ISOLATION 10.0
#define MATCH_PX  1.5
/* Bright, well-separated stars for the centroid statistics. */
#define SNR_BRIGHT       60.0
#define EDGE_BRIGHT      8.0
#define ISOLATION_BRIGHT 15.0

typedef struct field_cfg {
    double sigma, sky;
    int64_t nstars;
    uint64_t seed;
} field_cfg;

/* Magnitudes 4.5 .. 11 with a zero point of 1e6 e-: fluxes ~16000 .. 40 e-, SNR ~120 .. 0.5. */
static const field_cfg FIELDS[] = {
    {1.0, 5.0, 150, 101},
    {1.2, 10.0, 120, 102},
    {1.5, 20.0, 90, 103},
    {1.3, 15.0, 60, 104},
};
#define NFIELDS ((int)(sizeof FIELDS / sizeof FIELDS[0]))

static void test_planted_stars(void **state)
{
    (void)state;
    const int32_t w = 512, h = 512;
    for (int a = 0; a < 2; a++) {
        double chi2 = 0, mean_dx = 0, mean_dy = 0, rms = 0;
        int64_t nbright = 0, nchecked = 0, nspurious = 0;
        for (int f = 0; f < NFIELDS; f++) {
            const field_cfg *c = &FIELDS[f];
            sw_stars s;
            assert_int_equal(
                sw_stars_random(cpu, c->nstars, w, h, 4.5, 11.0, 1e6, 0.0, c->seed, &s), SW_OK);
            sw_image frame = star_frame(w, h, &s, c->sigma, c->sky, c->seed + 1000, SW_PIX_U16);
            sw_find_params p;
            sw_find_params_default(&p, w, h, SW_PIX_U16);
            p.algorithm = ALGOS[a];
            sw_find_stats st = {0};
            sw_spot_list l = find_frame(&p, &frame, &st);
            assert_int_equal(st.frames, 1);
            assert_int_equal(st.spots, l.count);
            assert_int_equal(st.valid_pixels, (int64_t)w * h);

            for (int64_t i = 0; i < s.count; i++) {
                double q = snr(s.flux[i], c->sigma, c->sky);
                double iso = nearest_star(&s, i), edge = edge_distance(s.x[i], s.y[i], w, h);
                if (q < SNR_MIN || edge < EDGE_MIN || iso < ISOLATION)
                    continue;
                nchecked++;
                double d;
                int64_t k = nearest_spot(&l, s.x[i], s.y[i], &d);
                if (!(d <= MATCH_PX))
                    fail_msg("%s, field %d: star %lld at (%.2f, %.2f), flux %.0f e-, SNR %.1f not "
                             "found (nearest spot %.2f px away)",
                             sw_find_algorithm_string(ALGOS[a]), f, (long long)i, s.x[i], s.y[i],
                             s.flux[i], q, d);
                if (q < SNR_BRIGHT || edge < EDGE_BRIGHT || iso < ISOLATION_BRIGHT)
                    continue;
                const sw_spot *sp = &l.spots[k];
                double dx = sp->x - s.x[i], dy = sp->y - s.y[i];
                chi2 += 0.5 * (dx * dx / sp->x_var + dy * dy / sp->y_var);
                mean_dx += dx;
                mean_dy += dy;
                rms += 0.5 * (dx * dx + dy * dy);
                nbright++;
            }
            /* Every spot belongs to a star: within 6 px of one (two merged stars can put a
             * centroid up to half their ~10 px separation from each). */
            for (int64_t k = 0; k < l.count; k++) {
                double bd = INFINITY;
                for (int64_t i = 0; i < s.count; i++)
                    bd = fmin(bd, hypot(l.spots[k].x - s.x[i], l.spots[k].y - s.y[i]));
                if (bd > 6.0)
                    nspurious++;
            }
            sw_spot_list_free(&l);
            sw_image_free(&frame);
            sw_stars_free(&s);
        }
        chi2 /= (double)nbright;
        mean_dx /= (double)nbright;
        mean_dy /= (double)nbright;
        rms = sqrt(rms / (double)nbright);
        print_message("%s: %lld stars checked, %lld bright: mean chi2 %.3f, mean error (%.4f, "
                      "%.4f) px, rms %.4f px, %lld spots away from stars\n",
                      sw_find_algorithm_string(ALGOS[a]), (long long)nchecked, (long long)nbright,
                      chi2, mean_dx, mean_dy, rms, (long long)nspurious);
        assert_true(nchecked >= 100);
        assert_true(nbright >= 20);
        /*
         * Centroid errors against the reported variances (find.h: x_var = (spread + 1/12) /
         * sum I, the Poisson variance of the intensity-weighted mean of the spot's pixels at gain
         * 1). Were the pixel set fixed and the errors Poisson noise alone, the mean of the
         * chi^2 terms would be 1 with a standard error of sqrt(2 / n) (~0.15 here). The pixel set
         * is itself noisy, though: pixels at the edge of a spot come and go with the noise
         * (test_centroid_noise measures that scatter: ~2x the reported variance for the
         * extended algorithm, ~8x for the basic one), and the set cuts the PSF's wings. Hence:
         *   extended (the default): between 0.2 and 5 (measured ~2 over 8 sets of seeds);
         *   basic: its strong pixels are only the star's core (the local mean includes the
         *   star: ~15 pixels even at SNR 100), whose edge dominates; measured 13 .. 20, bounds
         *   2 .. 60.
         * Either way a variance off by an order of magnitude (a missing or doubled 1 / sum I, a
         * variance in px instead of px^2) fails.
         */
        if (ALGOS[a] == SW_FIND_DISPERSION_EXTENDED)
            assert_true(chi2 > 0.2 && chi2 < 5.0);
        else
            assert_true(chi2 > 2.0 && chi2 < 60.0);
        /* No systematic offset: the 0-based pixel-centre convention (an offset by half a pixel
         * would show here), and small errors for bright stars (measured rms: 0.05 px basic,
         * 0.02 px extended). */
        assert_true(fabs(mean_dx) < 0.1 && fabs(mean_dy) < 0.1);
        assert_true(rms < 0.1);
        assert_true(nspurious <= 2);
    }
}

/*
 * The reported centroid variances against the scatter of the centroids over noise realizations
 * (the same stars rendered with NREAL noise seeds). find.h's x_var is the Poisson variance of the
 * intensity-weighted mean over the spot's pixels, the pixel set held fixed; the set itself moves
 * with the noise at the spot's edge, which adds scatter. So the ratio scatter / reported variance
 * is >= 1 up to sampling (its standard error over ~30 stars, two axes and 7 degrees of freedom is
 * ~0.07): the reported variance may understate the error but must not overstate it. Measured:
 * ~2 for the extended algorithm (~40-pixel spots), ~8 for the basic one (~15-pixel cores whose
 * edge pixels weigh a lot). Bounds 0.8 .. 4 and 0.8 .. 20: a variance off by an order of
 * magnitude either way fails.
 */
#define NREAL 8
static void test_centroid_noise(void **state)
{
    (void)state;
    const int32_t w = 512, h = 512;
    const double sigma = 1.2, sky = 10.0;
    sw_stars s;
    assert_int_equal(sw_stars_random(cpu, 120, w, h, 4.5, 8.5, 1e6, 0.0, 201, &s), SW_OK);
    sw_image frames[NREAL];
    for (int r = 0; r < NREAL; r++)
        frames[r] = star_frame(w, h, &s, sigma, sky, 210 + r, SW_PIX_U16);
    for (int a = 0; a < 2; a++) {
        sw_find_params p;
        sw_find_params_default(&p, w, h, SW_PIX_U16);
        p.algorithm = ALGOS[a];
        sw_spot_list l[NREAL];
        for (int r = 0; r < NREAL; r++)
            l[r] = find_frame(&p, &frames[r], NULL);
        double ratio = 0, rms = 0;
        int64_t n = 0;
        for (int64_t i = 0; i < s.count; i++) {
            if (snr(s.flux[i], sigma, sky) < SNR_BRIGHT ||
                edge_distance(s.x[i], s.y[i], w, h) < EDGE_BRIGHT ||
                nearest_star(&s, i) < ISOLATION_BRIGHT)
                continue;
            double mx = 0, my = 0, vx = 0, vy = 0, xs[NREAL], ys[NREAL];
            for (int r = 0; r < NREAL; r++) {
                double d;
                int64_t k = nearest_spot(&l[r], s.x[i], s.y[i], &d);
                assert_true(d <= MATCH_PX);
                xs[r] = l[r].spots[k].x;
                ys[r] = l[r].spots[k].y;
                vx += l[r].spots[k].x_var / NREAL;
                vy += l[r].spots[k].y_var / NREAL;
                mx += xs[r] / NREAL;
                my += ys[r] / NREAL;
            }
            double sx = 0, sy = 0;
            for (int r = 0; r < NREAL; r++) {
                sx += (xs[r] - mx) * (xs[r] - mx) / (NREAL - 1);
                sy += (ys[r] - my) * (ys[r] - my) / (NREAL - 1);
                rms += (xs[r] - s.x[i]) * (xs[r] - s.x[i]) + (ys[r] - s.y[i]) * (ys[r] - s.y[i]);
            }
            ratio += 0.5 * (sx / vx + sy / vy);
            n++;
        }
        ratio /= (double)n;
        rms = sqrt(rms / (2.0 * NREAL * (double)n));
        print_message(
            "%s: %lld bright stars, scatter / reported variance %.3f, rms error %.4f px\n",
            sw_find_algorithm_string(ALGOS[a]), (long long)n, ratio, rms);
        assert_true(n >= 25);
        assert_true(ratio > 0.8 && ratio < (ALGOS[a] == SW_FIND_DISPERSION ? 20.0 : 4.0));
        assert_true(rms < 0.1);
        for (int r = 0; r < NREAL; r++)
            sw_spot_list_free(&l[r]);
    }
    for (int r = 0; r < NREAL; r++)
        sw_image_free(&frames[r]);
    sw_stars_free(&s);
}

/*
 * Pure Poisson backgrounds: no spots. A false spot needs >= 3 connected pixels that are each
 * 3 local standard deviations above the local mean (p ~ 1e-3 each for Poisson at these means)
 * *and* windows whose index of dispersion exceeds 1 + 6 sqrt(2 / 48) (the sigma_b = 6 test:
 * ~6 standard deviations of the sample index of dispersion, p < 1e-6 for a 7 x 7 window even
 * with Poisson's heavier tail). Three such pixels side by side add ~3 x 9 b to the window's sum
 * of squares, well short of the ~59 b the dispersion test needs, so the joint probability per
 * pixel is far below 1e-9 and the expected count over the 12 frames of 512 x 512 (3.1e6 pixels)
 * below 0.01 for both algorithms. We allow at most 1 (a single unlucky fluctuation) and
 * require 0 of the extended algorithm, whose eroded core needs a whole 5 x 5 block of pixels with
 * dispersed windows around the strong ones (measured: no strong pixel at all in either).
 */
static void test_background_only(void **state)
{
    (void)state;
    const int32_t w = 512, h = 512;
    const double skies[] = {1.0, 5.0, 10.0, 20.0, 100.0, 1000.0};
    for (int a = 0; a < 2; a++) {
        int64_t false_spots = 0, strong = 0, pixels = 0;
        for (int b = 0; b < 6; b++) {
            for (int r = 0; r < 2; r++) {
                sw_image frame =
                    star_frame(w, h, NULL, 1.0, skies[b], 500 + 10 * b + r, SW_PIX_U16);
                sw_find_params p;
                sw_find_params_default(&p, w, h, SW_PIX_U16);
                p.algorithm = ALGOS[a];
                sw_find_stats st = {0};
                sw_spot_list l = find_frame(&p, &frame, &st);
                false_spots += l.count;
                strong += st.strong_pixels;
                pixels += st.valid_pixels;
                sw_spot_list_free(&l);
                sw_image_free(&frame);
            }
        }
        print_message("%s on backgrounds: %lld spots, %lld strong pixels of %lld\n",
                      sw_find_algorithm_string(ALGOS[a]), (long long)false_spots, (long long)strong,
                      (long long)pixels);
        assert_true(false_spots <= (ALGOS[a] == SW_FIND_DISPERSION ? 1 : 0));
        /* Strong pixels themselves are rare: each needs the joint 6-sigma / 3-sigma event. */
        assert_true(strong < pixels / 10000);
    }
}

/* ---------------------------------------------------------------- sequences */

typedef struct seq_source {
    const sw_image *frames; /* frames[index - base] */
    int64_t base, nframes;
    int64_t fail_read_at, fail_strong_at; /* -1: never */
    /* what the callbacks saw */
    int64_t nstrong, strong_index[16];
    sw_image strong_copy[16];
    int64_t nprogress, progress_done[16], progress_total[16];
} seq_source;

static sw_status seq_read(void *user, int64_t index, sw_image *dst)
{
    seq_source *s = user;
    if (index == s->fail_read_at)
        return sw_error_set(NULL, SW_EIO, "test source: frame %lld cannot be read",
                            (long long)index);
    if (index < s->base || index >= s->base + s->nframes)
        return sw_error_set(NULL, SW_EINVAL, "test source: frame %lld was not asked for",
                            (long long)index);
    const sw_image *src = &s->frames[index - s->base];
    if (dst->width != src->width || dst->height != src->height || dst->type != src->type)
        return sw_error_set(NULL, SW_EINVAL, "test source: destination of the wrong kind");
    size_t row = (size_t)src->width * sw_pixel_size(src->type);
    for (int32_t y = 0; y < src->height; y++)
        memcpy(sw_image_row(dst, y), sw_image_row(src, y), row);
    return SW_OK;
}

static sw_status seq_strong(void *user, int64_t index, const sw_image *mask)
{
    seq_source *s = user;
    if (index == s->fail_strong_at)
        return sw_error_set(NULL, SW_EIO, "test sink: mask %lld cannot be stored",
                            (long long)index);
    if (s->nstrong < 16) {
        sw_image *c = &s->strong_copy[s->nstrong];
        s->strong_index[s->nstrong] = index;
        if (sw_image_alloc(NULL, mask->width, mask->height, mask->type, c) != SW_OK ||
            sw_image_copy(NULL, mask, c) != SW_OK)
            return sw_error_set(NULL, SW_ENOMEM, "test sink: copy failed");
    }
    s->nstrong++;
    return SW_OK;
}

static void seq_progress(void *user, int64_t done, int64_t total)
{
    seq_source *s = user;
    if (s->nprogress < 16) {
        s->progress_done[s->nprogress] = done;
        s->progress_total[s->nprogress] = total;
    }
    s->nprogress++;
}

static void seq_source_free(seq_source *s)
{
    for (int i = 0; i < 16; i++)
        sw_image_free(&s->strong_copy[i]);
}

static sw_find_source source_of(seq_source *s)
{
    sw_find_source src = {seq_read, seq_strong, seq_progress, s};
    return src;
}

/* A few star-field frames of w x h (different stars and noise in each). */
static void star_frames(int32_t w, int32_t h, int n, sw_image *frames, sw_pixel_type t)
{
    for (int i = 0; i < n; i++) {
        sw_stars s;
        assert_int_equal(sw_stars_random(cpu, 40, w, h, 4.5, 10.0, 1e6, 0.0, 300 + i, &s), SW_OK);
        frames[i] = star_frame(w, h, &s, 1.2, 10.0, 400 + i, t);
        sw_stars_free(&s);
    }
}

/* sw_find_run frame by frame and sw_find_sequence (2-D) give the same spots, stats, masks, and
 * the sequence's callbacks see every frame in order. */
static void test_run_vs_sequence(void **state)
{
    (void)state;
    const int32_t w = 256, h = 192;
    enum { N = 5 };
    sw_image frames[N];
    star_frames(w, h, N, frames, SW_PIX_U16);
    for (int a = 0; a < 2; a++) {
        for (int conn = 4; conn <= 8; conn += 4) {
            sw_find_params p;
            sw_find_params_default(&p, w, h, SW_PIX_U16);
            p.algorithm = ALGOS[a];
            p.connectivity = conn;
            sw_find_plan *plan = make_plan(&p);
            const int64_t base = 7; /* frame numbers 7 .. 11 */
            sw_spot_list ref = {0};
            sw_find_stats ref_st = {0};
            sw_image masks[N];
            for (int i = 0; i < N; i++) {
                masks[i] = alloc_img(w, h, SW_PIX_U8);
                find_one(plan, &frames[i], base + i, &ref, &masks[i], &ref_st);
            }
            assert_true(ref.count > 3 * N);

            seq_source s = {.frames = frames,
                            .base = base,
                            .nframes = N,
                            .fail_read_at = -1,
                            .fail_strong_at = -1};
            sw_find_source src = source_of(&s);
            sw_spot_list got = {0};
            sw_find_stats st = {0};
            if (sw_find_sequence(plan, base, N, &src, 0, &got, &st) != SW_OK)
                fail_msg("sw_find_sequence: %s", sw_context_error(cpu));
            assert_lists_equal(&ref, &got);
            assert_memory_equal(&ref_st, &st, sizeof st);
            assert_int_equal(st.frames, N);
            /* Spots come in frame order and carry their frame. */
            for (int64_t k = 0; k < got.count; k++) {
                assert_true(got.spots[k].z0 >= base && got.spots[k].z0 < base + N);
                assert_int_equal(got.spots[k].z1, got.spots[k].z0 + 1);
                assert_true(got.spots[k].z == (double)got.spots[k].z0);
                if (k > 0)
                    assert_true(got.spots[k].z0 >= got.spots[k - 1].z0);
            }
            /* The strong callback got every frame's mask, in order; progress 1..N of N. */
            assert_int_equal(s.nstrong, N);
            assert_int_equal(s.nprogress, N);
            for (int i = 0; i < N; i++) {
                assert_int_equal(s.strong_index[i], base + i);
                assert_int_equal(s.strong_copy[i].type, SW_PIX_U8);
                assert_true(sw_image_equal(&s.strong_copy[i], &masks[i]));
                assert_int_equal(s.progress_done[i], i + 1);
                assert_int_equal(s.progress_total[i], N);
            }
            /* Appending to a list that holds spots keeps them. */
            sw_find_stats st2 = {0};
            seq_source s2 = {.frames = frames,
                             .base = base,
                             .nframes = N,
                             .fail_read_at = -1,
                             .fail_strong_at = -1};
            sw_find_source src2 = {seq_read, NULL, NULL, &s2};
            assert_int_equal(sw_find_sequence(plan, base + 1, 2, &src2, 0, &got, &st2), SW_OK);
            int64_t n12 = 0;
            for (int64_t k = 0; k < ref.count; k++)
                n12 += ref.spots[k].z0 == base + 1 || ref.spots[k].z0 == base + 2;
            assert_int_equal(got.count, ref.count + n12);
            for (int64_t k = 0; k < ref.count; k++)
                assert_spot_equal(&got.spots[k], &ref.spots[k]);
            assert_int_equal(st2.frames, 2);
            /* count 0: nothing happens. */
            int64_t before = got.count;
            assert_int_equal(sw_find_sequence(plan, 0, 0, &src2, 0, &got, NULL), SW_OK);
            assert_int_equal(got.count, before);

            for (int i = 0; i < N; i++)
                sw_image_free(&masks[i]);
            seq_source_free(&s);
            sw_spot_list_free(&ref);
            sw_spot_list_free(&got);
            sw_find_destroy(plan);
        }
    }
    for (int i = 0; i < N; i++)
        sw_image_free(&frames[i]);
}

/*
 * 3-D: star A at the same place in frames 1, 2 and 3 of 0..5, star B in frame 2 only. Joined
 * (three_d = 1): one spot for A with frames [1, 4) and z near 2, one for B in [2, 3); not joined:
 * four spots for them. Star C moves by 12 px between frames 4 and 5 (its pixels do not overlap):
 * two spots either way. A sequence that starts inside A's frames cuts it there.
 */
static void test_three_d(void **state)
{
    (void)state;
    const int32_t w = 64, h = 64;
    enum { N = 6 };
    const double ax = 20.3, ay = 30.6, bx = 45.2, by = 12.7;
    sw_image frames[N];
    for (int i = 0; i < N; i++) {
        double x[2], y[2], f[2];
        int n = 0;
        if (i >= 1 && i <= 3) {
            x[n] = ax, y[n] = ay, f[n++] = 5000.0;
        }
        if (i == 2) {
            x[n] = bx, y[n] = by, f[n++] = 5000.0;
        }
        if (i == 4 || i == 5) { /* C: frames 4 and 5, 12 px apart */
            x[n] = i == 4 ? 30.0 : 42.0, y[n] = 50.0, f[n++] = 5000.0;
        }
        sw_stars s = make_stars(n, x, y, f);
        frames[i] = star_frame(w, h, &s, 1.2, 10.0, 900 + i, SW_PIX_U16);
        sw_stars_free(&s);
    }
    for (int a = 0; a < 2; a++) {
        sw_find_params p;
        sw_find_params_default(&p, w, h, SW_PIX_U16);
        p.algorithm = ALGOS[a];
        sw_find_plan *plan = make_plan(&p);
        seq_source s = {
            .frames = frames, .base = 0, .nframes = N, .fail_read_at = -1, .fail_strong_at = -1};
        sw_find_source src = {seq_read, NULL, NULL, &s};

        sw_spot_list flat = {0};
        sw_find_stats st2 = {0};
        assert_int_equal(sw_find_sequence(plan, 0, N, &src, 0, &flat, &st2), SW_OK);
        /* frames 1 (A), 2 (B before A: its first pixel comes first in raster order), 3 (A),
         * 4 (C), 5 (C moved) */
        assert_int_equal(flat.count, 6);
        const int64_t zs[6] = {1, 2, 2, 3, 4, 5};
        for (int k = 0; k < 6; k++)
            assert_int_equal(flat.spots[k].z0, zs[k]);
        assert_near(flat.spots[1].x, bx, 0.2);
        assert_near(flat.spots[2].x, ax, 0.2);

        sw_spot_list l = {0};
        sw_find_stats st = {0};
        if (sw_find_sequence(plan, 0, N, &src, 1, &l, &st) != SW_OK)
            fail_msg("sw_find_sequence 3-D: %s", sw_context_error(cpu));
        assert_int_equal(l.count, 4);
        assert_int_equal(st.spots, 4);
        assert_int_equal(st.components, 4);
        assert_int_equal(st.frames, N);
        assert_int_equal(st.strong_pixels, st2.strong_pixels);
        const sw_spot *A = &l.spots[0], *B = &l.spots[1];
        /* A: frames [1, 4), z the intensity-weighted frame (equal fluxes: ~2). */
        assert_int_equal(A->z0, 1);
        assert_int_equal(A->z1, 4);
        assert_near(A->z, 2.0, 0.05);
        assert_true(A->z_var > 0.0);
        assert_near(A->x, ax, 0.1);
        assert_near(A->y, ay, 0.1);
        /* Its sums are those of its three 2-D parts. */
        const sw_spot *parts[3] = {&flat.spots[0], &flat.spots[2], &flat.spots[3]};
        double sum_i = 0, sum_x = 0;
        int64_t npix = 0;
        for (int k = 0; k < 3; k++) {
            sum_i += parts[k]->intensity;
            sum_x += parts[k]->intensity * parts[k]->x;
            npix += parts[k]->npix;
        }
        assert_int_equal(A->npix, npix);
        assert_near(A->intensity, sum_i, 1e-9 * sum_i);
        assert_near(A->x, sum_x / sum_i, 1e-9);
        /* B: frame 2 only. */
        assert_int_equal(B->z0, 2);
        assert_int_equal(B->z1, 3);
        assert_true(B->z == 2.0);
        /* A one-frame 3-D spot has the 1/12 frame^2 of a single frame's extent over its counts
         * (find.h: z_var alike x_var); the 2-D spot has none. Otherwise identical. */
        assert_near(B->z_var, 1.0 / 12.0 / B->intensity, 1e-15);
        sw_spot b2 = *B;
        b2.z_var = flat.spots[1].z_var;
        assert_spot_equal(&b2, &flat.spots[1]);
        /* C: two separate spots in frames 4 and 5. */
        assert_int_equal(l.spots[2].z0, 4);
        assert_int_equal(l.spots[2].z1, 5);
        assert_int_equal(l.spots[3].z0, 5);
        assert_int_equal(l.spots[3].z1, 6);
        assert_near(l.spots[2].x, 30.0, 0.2);
        assert_near(l.spots[3].x, 42.0, 0.2);

        /* A sequence that starts at frame 2 cuts A: [2, 4). */
        sw_spot_list part = {0};
        assert_int_equal(sw_find_sequence(plan, 2, 2, &src, 1, &part, NULL), SW_OK);
        assert_int_equal(part.count, 2);
        assert_int_equal(part.spots[0].z0, 2); /* B first: same first frame, earlier pixel */
        assert_int_equal(part.spots[0].z1, 3);
        assert_int_equal(part.spots[1].z0, 2);
        assert_int_equal(part.spots[1].z1, 4);
        assert_near(part.spots[1].z, 2.5, 0.05);

        sw_spot_list_free(&part);
        sw_spot_list_free(&l);
        sw_spot_list_free(&flat);
        sw_find_destroy(plan);
    }
    for (int i = 0; i < N; i++)
        sw_image_free(&frames[i]);
}

/* A failing read callback stops the sequence with its status and message and appends nothing;
 * so does a failing strong callback. */
static void test_sequence_failures(void **state)
{
    (void)state;
    const int32_t w = 128, h = 96;
    enum { N = 5 };
    sw_image frames[N];
    star_frames(w, h, N, frames, SW_PIX_U16);
    sw_find_params p;
    sw_find_params_default(&p, w, h, SW_PIX_U16);
    sw_find_plan *plan = make_plan(&p);
    sw_spot dummy;
    memset(&dummy, 0, sizeof dummy);
    dummy.x = 1234.5;
    dummy.npix = 77;
    for (int three_d = 0; three_d <= 1; three_d++) {
        for (int64_t k = 0; k < N; k++) {
            for (int which = 0; which < 2; which++) {
                seq_source s = {.frames = frames,
                                .base = 10,
                                .nframes = N,
                                .fail_read_at = which == 0 ? 10 + k : -1,
                                .fail_strong_at = which == 1 ? 10 + k : -1};
                sw_find_source src = source_of(&s);
                sw_spot_list l = {0};
                l.spots = malloc(sizeof(sw_spot));
                assert_non_null(l.spots);
                l.spots[0] = dummy;
                l.count = l.capacity = 1;
                sw_find_stats st = {0};
                sw_status got = sw_find_sequence(plan, 10, N, &src, three_d, &l, &st);
                assert_int_equal(got, SW_EIO);
                const char *msg = sw_context_error(cpu);
                char want[64];
                snprintf(want, sizeof want,
                         which == 0 ? "frame %lld cannot be read" : "mask %lld cannot be stored",
                         (long long)(10 + k));
                if (!strstr(msg, want))
                    fail_msg("message \"%s\" does not carry \"%s\"", msg, want);
                /* Nothing appended, the list's spot untouched. */
                assert_int_equal(l.count, 1);
                assert_spot_equal(&l.spots[0], &dummy);
                /* Nothing after the failing frame was reported. A failing strong callback
                 * comes after frames 0 .. k-1 are complete; a failing read may stop the
                 * pipeline before the frames read ahead of it are processed. */
                if (which == 1) {
                    assert_int_equal(s.nprogress, k);
                    assert_int_equal(s.nstrong, k);
                } else {
                    assert_true(s.nprogress <= k);
                    assert_true(s.nstrong <= k);
                }
                sw_spot_list_free(&l);
                seq_source_free(&s);
            }
        }
    }
    /* A source without a read function, a negative first frame or count: SW_EINVAL. */
    sw_find_source none = {NULL, NULL, NULL, NULL};
    sw_spot_list l = {0};
    assert_int_equal(sw_find_sequence(plan, 0, 1, &none, 0, &l, NULL), SW_EINVAL);
    seq_source s = {
        .frames = frames, .base = 0, .nframes = N, .fail_read_at = -1, .fail_strong_at = -1};
    sw_find_source src = source_of(&s);
    assert_int_equal(sw_find_sequence(plan, -1, 2, &src, 0, &l, NULL), SW_EINVAL);
    assert_int_equal(sw_find_sequence(plan, 0, -2, &src, 0, &l, NULL), SW_EINVAL);
    assert_int_equal(sw_find_sequence(NULL, 0, 1, &src, 0, &l, NULL), SW_EINVAL);
    assert_int_equal(l.count, 0);
    sw_find_destroy(plan);
    for (int i = 0; i < N; i++)
        sw_image_free(&frames[i]);
}

/* ---------------------------------------------------------------- filters */

#define BG 10.0 /* flat, noise-free background of the hand-made frames */

/* A 3 x 3 spot of 200 with 300 in the middle at (cx, cy): 9 strong pixels for both algorithms,
 * centroid exactly (cx, cy), peak there. */
static void put_square(sw_image *img, int32_t cx, int32_t cy)
{
    for (int dy = -1; dy <= 1; dy++)
        for (int dx = -1; dx <= 1; dx++)
            set_px(img, cx + dx, cy + dy, dx == 0 && dy == 0 ? 300 : 200);
}

static const sw_spot *spot_at(const sw_spot_list *l, double x, double y, double tol)
{
    for (int64_t i = 0; i < l->count; i++)
        if (fabs(l->spots[i].x - x) <= tol && fabs(l->spots[i].y - y) <= tol)
            return &l->spots[i];
    return NULL;
}

static void check_square(const sw_spot_list *l, int32_t cx, int32_t cy)
{
    const sw_spot *s = spot_at(l, cx, cy, 1e-9);
    if (!s)
        fail_msg("the 3 x 3 control spot at (%d, %d) is missing", cx, cy);
    /* find.h's moments by hand: sum I = 8 x 200 + 300; sum I dx^2 = 6 x 200. */
    assert_int_equal(s->npix, 9);
    assert_true(s->intensity == 1900.0);
    assert_near(s->x_var, (1200.0 / 1900.0 + 1.0 / 12.0) / 1900.0, 1e-15);
    assert_near(s->y_var, (1200.0 / 1900.0 + 1.0 / 12.0) / 1900.0, 1e-15);
    assert_int_equal(s->x0, cx - 1);
    assert_int_equal(s->x1, cx + 2);
    assert_int_equal(s->y0, cy - 1);
    assert_int_equal(s->y1, cy + 2);
    assert_int_equal(s->peak_x, cx);
    assert_int_equal(s->peak_y, cy);
    assert_true(s->peak == 300.0);
}

/* Minimum spot size and connectivity: a 2-pixel spot, a diagonal of 3 single pixels (one
 * 8-connected spot, three 4-connected ones), a 3 x 3 control. */
static void test_filter_size_small(void **state)
{
    (void)state;
    const int32_t w = 128, h = 128;
    sw_image f = alloc_img(w, h, SW_PIX_U16);
    fill(&f, BG);
    set_px(&f, 30, 30, 200);
    set_px(&f, 31, 30, 200);
    for (int k = 0; k < 3; k++)
        set_px(&f, 60 + k, 60 + k, 200);
    put_square(&f, 90, 90);
    for (int a = 0; a < 2; a++) {
        sw_find_params p;
        sw_find_params_default(&p, w, h, SW_PIX_U16);
        p.algorithm = ALGOS[a];
        /* defaults: min 3, 4-connected */
        sw_find_stats st = {0};
        sw_spot_list l = find_frame(&p, &f, &st);
        assert_int_equal(l.count, 1);
        check_square(&l, 90, 90);
        assert_int_equal(st.strong_pixels, 2 + 3 + 9);
        assert_int_equal(st.components, 5);
        assert_int_equal(st.rejected_small, 4);
        assert_int_equal(st.rejected_large + st.rejected_separation, 0);
        assert_int_equal(st.spots, 1);
        sw_spot_list_free(&l);

        /* min 2: the pair appears, with the moments of find.h. */
        p.min_spot_size = 2;
        memset(&st, 0, sizeof st);
        l = find_frame(&p, &f, &st);
        assert_int_equal(l.count, 2);
        assert_int_equal(st.rejected_small, 3);
        const sw_spot *pair = &l.spots[0]; /* first in raster order */
        assert_int_equal(pair->npix, 2);
        assert_true(pair->intensity == 400.0);
        assert_true(pair->x == 30.5 && pair->y == 30.0);
        assert_near(pair->x_var, (0.25 + 1.0 / 12.0) / 400.0, 1e-15);
        assert_near(pair->y_var, (1.0 / 12.0) / 400.0, 1e-15);
        assert_int_equal(pair->x0, 30);
        assert_int_equal(pair->x1, 32);
        assert_int_equal(pair->y0, 30);
        assert_int_equal(pair->y1, 31);
        assert_int_equal(pair->peak_x, 30); /* the first of equals in raster order */
        assert_int_equal(pair->z0, 0);
        assert_int_equal(pair->z1, 1);
        sw_spot_list_free(&l);

        /* min 1 (and 0): everything, 5 spots. */
        for (int m = 0; m <= 1; m++) {
            p.min_spot_size = m;
            memset(&st, 0, sizeof st);
            l = find_frame(&p, &f, &st);
            assert_int_equal(l.count, 5);
            assert_int_equal(st.rejected_small, 0);
            sw_spot_list_free(&l);
        }

        /* min 10: nothing. */
        p.min_spot_size = 10;
        memset(&st, 0, sizeof st);
        l = find_frame(&p, &f, &st);
        assert_int_equal(l.count, 0);
        assert_int_equal(st.rejected_small, 5);
        sw_spot_list_free(&l);

        /* 8-connected, min 3: the diagonal is one spot of 3; the pair is still too small. */
        p.min_spot_size = 3;
        p.connectivity = 8;
        memset(&st, 0, sizeof st);
        l = find_frame(&p, &f, &st);
        assert_int_equal(l.count, 2);
        assert_int_equal(st.components, 3);
        assert_int_equal(st.rejected_small, 1);
        const sw_spot *diag = spot_at(&l, 61.0, 61.0, 1e-9);
        assert_non_null(diag);
        assert_int_equal(diag->npix, 3);
        assert_int_equal(diag->x0, 60);
        assert_int_equal(diag->x1, 63);
        assert_int_equal(diag->y0, 60);
        assert_int_equal(diag->y1, 63);
        check_square(&l, 90, 90);
        sw_spot_list_free(&l);
    }
    sw_image_free(&f);
}

/*
 * Maximum spot size: a serpentine line of 2057 pixels (20 rows of 100 joined by 19 columns of 3),
 * one pixel wide and 4 rows apart, so that every one of its pixels is strong for the basic
 * algorithm; a 3 x 3 control. (The extended algorithm's eroded core fills the space between the
 * rows: its blob is larger, and more than a quarter of the frame: max_strong_fraction 0.)
 */
static void test_filter_size_large(void **state)
{
    (void)state;
    const int32_t w = 128, h = 128;
    sw_image f = alloc_img(w, h, SW_PIX_U16);
    fill(&f, BG);
    int64_t n = 0;
    for (int r = 0; r < 20; r++) {
        int32_t y = 10 + 4 * r;
        for (int32_t x = 10; x < 110; x++, n++)
            set_px(&f, x, y, 200);
        if (r < 19) {
            int32_t x = r % 2 == 0 ? 109 : 10;
            for (int k = 1; k <= 3; k++, n++)
                set_px(&f, x, y + k, 200);
        }
    }
    assert_int_equal(n, 2057);
    put_square(&f, 118, 118);
    for (int a = 0; a < 2; a++) {
        sw_find_params p;
        sw_find_params_default(&p, w, h, SW_PIX_U16);
        p.algorithm = ALGOS[a];
        p.max_strong_fraction = 0;
        p.max_separation = 0; /* the blob's peak (its first pixel) is far from its centroid */
        sw_find_stats st = {0};
        sw_spot_list l = find_frame(&p, &f, &st); /* max 1000 */
        assert_int_equal(l.count, 1);
        check_square(&l, 118, 118);
        assert_int_equal(st.components, 2);
        assert_int_equal(st.rejected_large, 1);
        assert_int_equal(st.rejected_small + st.rejected_separation, 0);
        sw_spot_list_free(&l);

        p.max_spot_size = 0; /* no limit */
        memset(&st, 0, sizeof st);
        l = find_frame(&p, &f, &st);
        assert_int_equal(l.count, 2);
        assert_int_equal(st.rejected_large, 0);
        const sw_spot *blob = &l.spots[0];
        if (ALGOS[a] == SW_FIND_DISPERSION) {
            assert_int_equal(blob->npix, 2057);
            assert_true(blob->intensity == 2057.0 * 200.0);
            assert_int_equal(blob->x0, 10);
            assert_int_equal(blob->x1, 110);
            assert_int_equal(blob->y0, 10);
            assert_int_equal(blob->y1, 87);
        } else {
            assert_true(blob->npix > 2057);
        }
        int64_t size = blob->npix;
        sw_spot_list_free(&l);

        /* The limit is inclusive: npix == max is kept, npix == max + 1 is not. */
        p.max_spot_size = size;
        memset(&st, 0, sizeof st);
        l = find_frame(&p, &f, &st);
        assert_int_equal(l.count, 2);
        sw_spot_list_free(&l);
        p.max_spot_size = size - 1;
        memset(&st, 0, sizeof st);
        l = find_frame(&p, &f, &st);
        assert_int_equal(l.count, 1);
        assert_int_equal(st.rejected_large, 1);
        sw_spot_list_free(&l);

        /* With the default max_strong_fraction the extended algorithm's blob (more than a
         * quarter of the frame) is an error; the basic one (2066 of 16384) is not. */
        p.max_strong_fraction = 0.25;
        sw_find_plan *plan = make_plan(&p);
        sw_spot_list l2 = {0};
        sw_status got = sw_find_run(plan, &f, 0, &l2, NULL, NULL);
        assert_int_equal(got, ALGOS[a] == SW_FIND_DISPERSION ? SW_OK : SW_ERANGE);
        sw_spot_list_free(&l2);
        sw_find_destroy(plan);
    }
    sw_image_free(&f);
}

/* Maximum separation: an L of 23 pixels whose peak is the end of one arm (far from the
 * centroid), and a 3 x 3 control. */
static void test_filter_separation(void **state)
{
    (void)state;
    const int32_t w = 128, h = 128;
    sw_image f = alloc_img(w, h, SW_PIX_U16);
    fill(&f, BG);
    double s = 0, sx = 0, sy = 0;
    for (int k = 0; k < 23; k++) {
        int32_t x = k < 12 ? 20 + k : 20, y = k < 12 ? 40 : 40 + (k - 11);
        double v = k == 11 ? 300 : 200; /* the peak: (31, 40), the end of the horizontal arm */
        set_px(&f, x, y, v);
        s += v;
        sx += v * x;
        sy += v * y;
    }
    double cx = sx / s, cy = sy / s, sep = hypot(31 - cx, 40 - cy);
    assert_true(sep > 5.0);
    put_square(&f, 90, 90);
    for (int a = 0; a < 2; a++) {
        sw_find_params p;
        sw_find_params_default(&p, w, h, SW_PIX_U16);
        p.algorithm = ALGOS[a];
        sw_find_stats st = {0};
        sw_spot_list l = find_frame(&p, &f, &st); /* max_separation 2 */
        assert_int_equal(l.count, 1);
        check_square(&l, 90, 90);
        assert_int_equal(st.rejected_separation, 1);
        assert_int_equal(st.rejected_small + st.rejected_large, 0);
        sw_spot_list_free(&l);

        const double seps[3] = {0.0, sep + 0.01, -1.0}; /* off, just enough, off */
        for (int k = 0; k < 3; k++) {
            p.max_separation = seps[k];
            memset(&st, 0, sizeof st);
            l = find_frame(&p, &f, &st);
            assert_int_equal(l.count, 2);
            assert_int_equal(st.rejected_separation, 0);
            const sw_spot *L = &l.spots[0];
            assert_int_equal(L->npix, 23);
            assert_true(L->intensity == s);
            assert_near(L->x, cx, 1e-12);
            assert_near(L->y, cy, 1e-12);
            assert_int_equal(L->peak_x, 31);
            assert_int_equal(L->peak_y, 40);
            sw_spot_list_free(&l);
        }
        p.max_separation = sep - 0.01;
        memset(&st, 0, sizeof st);
        l = find_frame(&p, &f, &st);
        assert_int_equal(l.count, 1);
        assert_int_equal(st.rejected_separation, 1);
        sw_spot_list_free(&l);
    }
    sw_image_free(&f);
}

/* ---------------------------------------------------------------- strong fraction */

/* A frame of bright random texture everywhere (uniform 0 .. 60000): a large share of its pixels
 * is strong, which is not a spot pattern: SW_ERANGE naming the frame. */
static void test_strong_fraction(void **state)
{
    (void)state;
    const int32_t w = 96, h = 80;
    sw_image f = alloc_img(w, h, SW_PIX_U16);
    for (int32_t y = 0; y < h; y++)
        for (int32_t x = 0; x < w; x++) {
            sw_rng4 r = sw_rng_draw(77, SW_RNG_STREAM_TEST, (uint64_t)(y * w + x));
            set_px(&f, x, y, (double)(r.v[0] % 60001u));
        }
    for (int a = 0; a < 2; a++) {
        sw_find_params p;
        sw_find_params_default(&p, w, h, SW_PIX_U16);
        p.algorithm = ALGOS[a];
        sw_find_plan *plan = make_plan(&p);
        sw_spot_list l = {0};
        sw_find_stats st = {0};
        assert_int_equal(sw_find_run(plan, &f, 7, &l, NULL, &st), SW_ERANGE);
        const char *msg = sw_context_error(cpu);
        if (!strstr(msg, "frame 7 "))
            fail_msg("the message does not name frame 7: %s", msg);
        assert_int_equal(l.count, 0);
        assert_int_equal(st.frames, 0);
        /* Through a sequence: frames 3 .. 4, the error names frame 3, nothing appended. */
        sw_image frames[2] = {f, f};
        seq_source s = {
            .frames = frames, .base = 3, .nframes = 2, .fail_read_at = -1, .fail_strong_at = -1};
        sw_find_source src = {seq_read, NULL, NULL, &s};
        assert_int_equal(sw_find_sequence(plan, 3, 2, &src, a, &l, NULL), SW_ERANGE);
        msg = sw_context_error(cpu);
        if (!strstr(msg, "frame 3 "))
            fail_msg("the message does not name frame 3: %s", msg);
        assert_int_equal(l.count, 0);
        sw_find_destroy(plan);
        /* Off (0): the frame goes through. */
        p.max_strong_fraction = 0;
        plan = make_plan(&p);
        memset(&st, 0, sizeof st);
        assert_int_equal(sw_find_run(plan, &f, 7, &l, NULL, &st), SW_OK);
        assert_true(st.strong_pixels > (int64_t)w * h / 4);
        sw_spot_list_free(&l);
        sw_find_destroy(plan);
    }
    sw_image_free(&f);
}

/* ---------------------------------------------------------------- bad input */

static void expect_einval(const sw_find_params *p, const char *what)
{
    sw_find_plan *plan = (sw_find_plan *)(uintptr_t)1;
    sw_status st = sw_find_create(cpu, p, &plan);
    if (st != SW_EINVAL)
        fail_msg("%s: sw_find_create gave %s, expected SW_EINVAL", what, sw_status_string(st));
    assert_null(plan);
    assert_true(strlen(sw_context_error(cpu)) > 0);
}

static void test_bad_params(void **state)
{
    (void)state;
    const int32_t w = 64, h = 48;
    sw_find_params d, p;
    sw_find_params_default(&d, w, h, SW_PIX_U16);
#define BAD(field_assignments, what)                                                               \
    do {                                                                                           \
        p = d;                                                                                     \
        field_assignments;                                                                         \
        expect_einval(&p, what);                                                                   \
    } while (0)
    BAD(p.kernel_x = 0, "kernel_x 0");
    BAD(p.kernel_y = 0, "kernel_y 0");
    BAD(p.kernel_x = SW_FIND_MAX_KERNEL + 1, "kernel_x 16");
    BAD(p.kernel_y = 16, "kernel_y 16");
    BAD(p.min_local = 1, "min_local 1");
    BAD(p.min_local = 50, "min_local above the 7 x 7 window");
    BAD((p.kernel_x = 1, p.kernel_y = 2, p.min_local = 16), "min_local above the 3 x 5 window");
    BAD(p.sigma_background = -0.1, "sigma_b < 0");
    BAD(p.sigma_strong = -1.0, "sigma_s < 0");
    BAD(p.sigma_strong = NAN, "sigma_s NaN");
    BAD(p.sigma_background = INFINITY, "sigma_b Inf");
    BAD(p.gain = NAN, "gain NaN");
    BAD(p.gain = 0.0, "gain 0");
    BAD(p.gain = -1.0, "gain < 0");
    BAD(p.connectivity = 6, "connectivity 6");
    BAD(p.connectivity = 0, "connectivity 0");
    BAD((p.min_spot_size = 10, p.max_spot_size = 9), "max < min spot size");
    BAD(p.min_spot_size = -1, "min spot size < 0");
    BAD(p.global_threshold = -1.0, "negative global threshold");
    BAD(p.global_threshold = NAN, "NaN global threshold");
    BAD(p.overload = -5.0, "negative overload");
    BAD(p.width = 0, "width 0");
    BAD(p.height = -3, "height < 0");
    BAD(p.width = SW_IMAGE_MAX_DIM + 1, "width above the largest image");
    BAD((p.width = 65536, p.height = 65536), "more pixels than an image may have");
    BAD(p.type = (sw_pixel_type)0, "pixel type 0");
    BAD(p.type = (sw_pixel_type)9, "pixel type 9");
    BAD(p.algorithm = (sw_find_algorithm)5, "algorithm 5");
    BAD(p.window = (sw_find_window)7, "window 7");
    BAD(p.max_components = 0, "max_components 0");
    BAD(p.max_separation = NAN, "max_separation NaN");
    BAD(p.max_strong_fraction = NAN, "max_strong_fraction NaN");
    float *gm = malloc((size_t)w * h * sizeof(float));
    assert_non_null(gm);
    for (int i = 0; i < w * h; i++)
        gm[i] = 1.5f;
    gm[w * 10 + 7] = 0.0f;
    BAD(p.gain_map = gm, "a gain map with a 0");
    gm[w * 10 + 7] = NAN;
    BAD(p.gain_map = gm, "a gain map with a NaN");
    gm[w * 10 + 7] = -2.0f;
    BAD(p.gain_map = gm, "a gain map with a negative gain");
    gm[w * 10 + 7] = INFINITY;
    BAD(p.gain_map = gm, "a gain map with an Inf");
    /* A gain map replaces the scalar gain, which is then not checked. */
    gm[w * 10 + 7] = 1.5f;
    p = d;
    p.gain_map = gm;
    p.gain = NAN;
    sw_find_plan *plan = NULL;
    assert_int_equal(sw_find_create(cpu, &p, &plan), SW_OK);
    sw_find_destroy(plan);
    free(gm);
#undef BAD
    /* NULLs. */
    assert_int_equal(sw_find_create(cpu, &d, NULL), SW_EINVAL);
    plan = NULL;
    assert_int_equal(sw_find_create(cpu, NULL, &plan), SW_EINVAL);
    assert_null(plan);
    assert_int_equal(sw_find_create(NULL, &d, &plan), SW_EINVAL);
    assert_null(plan);
    sw_find_destroy(NULL);
    /* The edges of what is allowed. */
    p = d;
    p.kernel_x = 1;
    p.kernel_y = SW_FIND_MAX_KERNEL;
    p.min_local = 3 * (2 * SW_FIND_MAX_KERNEL + 1);
    p.connectivity = 8;
    p.min_spot_size = 0;
    p.max_spot_size = 0;
    p.sigma_background = 0;
    p.sigma_strong = 0;
    assert_int_equal(sw_find_create(cpu, &p, &plan), SW_OK);
    sw_find_destroy(plan);
    p = d;
    p.min_local = 0;
    p.max_spot_size = 3; /* == min */
    assert_int_equal(sw_find_create(cpu, &p, &plan), SW_OK);
    sw_find_destroy(plan);
    /* Algorithm names. */
    sw_find_algorithm alg;
    assert_int_equal(sw_find_algorithm_parse("dispersion", &alg), SW_OK);
    assert_int_equal(alg, SW_FIND_DISPERSION);
    assert_int_equal(sw_find_algorithm_parse("dispersion_extended", &alg), SW_OK);
    assert_int_equal(alg, SW_FIND_DISPERSION_EXTENDED);
    assert_int_equal(sw_find_algorithm_parse("dispersionx", &alg), SW_EINVAL);
    assert_int_equal(sw_find_algorithm_parse(NULL, &alg), SW_EINVAL);
    assert_string_equal(sw_find_algorithm_string(SW_FIND_DISPERSION), "dispersion");
    assert_string_equal(sw_find_algorithm_string(SW_FIND_DISPERSION_EXTENDED),
                        "dispersion_extended");
    /* Defaults as find.h lists them. */
    assert_int_equal(d.algorithm, SW_FIND_DISPERSION_EXTENDED);
    assert_int_equal(d.kernel_x, 3);
    assert_int_equal(d.kernel_y, 3);
    assert_true(d.sigma_background == 6.0 && d.sigma_strong == 3.0);
    assert_int_equal(d.min_local, 2);
    assert_true(d.global_threshold == 0.0 && d.gain == 1.0);
    assert_int_equal(d.connectivity, 4);
    assert_int_equal(d.min_spot_size, 3);
    assert_int_equal(d.max_spot_size, 1000);
    assert_true(d.max_separation == 2.0 && d.max_strong_fraction == 0.25);
}

/* Frames that do not fit the plan, and frames with nothing in them. */
static void test_bad_frames(void **state)
{
    (void)state;
    const int32_t w = 64, h = 48;
    for (int a = 0; a < 2; a++) {
        sw_find_params p;
        sw_find_params_default(&p, w, h, SW_PIX_U16);
        p.algorithm = ALGOS[a];
        sw_find_plan *plan = make_plan(&p);
        sw_spot_list l = {0};
        sw_image wrong_w = alloc_img(w + 1, h, SW_PIX_U16);
        sw_image wrong_h = alloc_img(w, h - 1, SW_PIX_U16);
        sw_image wrong_t = alloc_img(w, h, SW_PIX_U8);
        sw_image wrong_f = alloc_img(w, h, SW_PIX_F32);
        sw_image good = alloc_img(w, h, SW_PIX_U16);
        sw_image mask = alloc_img(w, h, SW_PIX_U8);
        sw_image mask_bad = alloc_img(w, h, SW_PIX_U16);
        sw_image mask_small = alloc_img(w, h - 2, SW_PIX_U8);
        assert_int_equal(sw_find_run(plan, &wrong_w, 0, &l, NULL, NULL), SW_EINVAL);
        assert_int_equal(sw_find_run(plan, &wrong_h, 0, &l, NULL, NULL), SW_EINVAL);
        assert_int_equal(sw_find_run(plan, &wrong_t, 0, &l, NULL, NULL), SW_EINVAL);
        assert_int_equal(sw_find_run(plan, &wrong_f, 0, &l, NULL, NULL), SW_EINVAL);
        assert_int_equal(sw_find_run(plan, NULL, 0, &l, NULL, NULL), SW_EINVAL);
        assert_int_equal(sw_find_run(NULL, &good, 0, &l, NULL, NULL), SW_EINVAL);
        assert_int_equal(sw_find_run(plan, &good, 0, &l, &mask_bad, NULL), SW_EINVAL);
        assert_int_equal(sw_find_run(plan, &good, 0, &l, &mask_small, NULL), SW_EINVAL);
        sw_image nodata = good;
        nodata.data = NULL;
        assert_int_equal(sw_find_run(plan, &nodata, 0, &l, NULL, NULL), SW_EINVAL);
        sw_image dev = good;
        dev.memory = SW_MEM_DEVICE;
        assert_int_equal(sw_find_run(plan, &dev, 0, &l, NULL, NULL), SW_EINVAL);
        assert_int_equal(l.count, 0);

        /* An empty (all zero) frame: no spots, no strong pixels, every pixel valid. */
        sw_find_stats st = {0};
        fill(&mask, 7);
        assert_int_equal(sw_find_run(plan, &good, 0, &l, &mask, &st), SW_OK);
        assert_int_equal(l.count, 0);
        assert_int_equal(st.valid_pixels, (int64_t)w * h);
        assert_int_equal(st.strong_pixels, 0);
        for (int32_t y = 0; y < h; y++)
            for (int32_t x = 0; x < w; x++)
                assert_true(sw_image_get(&mask, x, y) == 0.0);
        /* Saturated: every pixel at 0xffff (and at 0xfffe, the default overload) is invalid. */
        for (int v = 0; v < 2; v++) {
            fill(&good, v == 0 ? 65535 : 65534);
            memset(&st, 0, sizeof st);
            assert_int_equal(sw_find_run(plan, &good, 0, &l, NULL, &st), SW_OK);
            assert_int_equal(l.count, 0);
            assert_int_equal(st.valid_pixels, 0);
            assert_int_equal(st.strong_pixels, 0);
        }
        /* A frame with a saturated 5 x 5 block in a flat background: no spot, no error. */
        fill(&good, BG);
        for (int32_t y = 20; y < 25; y++)
            for (int32_t x = 30; x < 35; x++)
                set_px(&good, x, y, 65535);
        memset(&st, 0, sizeof st);
        assert_int_equal(sw_find_run(plan, &good, 0, &l, NULL, &st), SW_OK);
        assert_int_equal(st.valid_pixels, (int64_t)w * h - 25);
        assert_int_equal(st.strong_pixels, 0);
        assert_int_equal(l.count, 0);
        sw_find_destroy(plan);

        /* All masked: no spots, no error, no valid pixels. A spot under a partial mask is
         * found without its masked pixels. */
        uint8_t *m = calloc((size_t)w * h, 1);
        assert_non_null(m);
        p.mask = m;
        plan = make_plan(&p);
        fill(&good, BG);
        put_square(&good, 20, 20);
        memset(&st, 0, sizeof st);
        assert_int_equal(sw_find_run(plan, &good, 0, &l, NULL, &st), SW_OK);
        assert_int_equal(l.count, 0);
        assert_int_equal(st.valid_pixels, 0);
        sw_find_destroy(plan);
        memset(m, 1, (size_t)w * h);
        m[19 * w + 21] = 0; /* a corner of the 3 x 3 */
        plan = make_plan(&p);
        memset(m, 0, (size_t)w * h); /* the plan keeps its own copy */
        memset(&st, 0, sizeof st);
        assert_int_equal(sw_find_run(plan, &good, 0, &l, &mask, &st), SW_OK);
        assert_int_equal(st.valid_pixels, (int64_t)w * h - 1);
        assert_int_equal(l.count, 1);
        assert_int_equal(l.spots[0].npix, 8);
        assert_true(l.spots[0].intensity == 1700.0);
        assert_true(sw_image_get(&mask, 21, 19) == 0.0);
        sw_find_destroy(plan);
        free(m);

        sw_spot_list_free(&l);
        sw_image_free(&wrong_w);
        sw_image_free(&wrong_h);
        sw_image_free(&wrong_t);
        sw_image_free(&wrong_f);
        sw_image_free(&good);
        sw_image_free(&mask);
        sw_image_free(&mask_bad);
        sw_image_free(&mask_small);
    }
}

/* ---------------------------------------------------------------- pixel types, NaN, gain map */

static sw_spot_list find_with(sw_find_params p, const sw_image *frame)
{
    p.width = frame->width;
    p.height = frame->height;
    p.type = frame->type;
    return find_frame(&p, frame, NULL);
}

/*
 * The same counts as u16, u32 and f32 pixels give the same spots; f32 NaN and Inf pixels are
 * masked: the f32 frame with NaN/Inf at a set S gives exactly the spots of the u16 frame with
 * a mask that excludes S. A uniform gain map equals the scalar gain.
 */
static void test_types_nan_gain(void **state)
{
    (void)state;
    const int32_t w = 200, h = 160;
    sw_stars s;
    assert_int_equal(sw_stars_random(cpu, 50, w, h, 4.5, 10.0, 1e6, 0.0, 61, &s), SW_OK);
    sw_image u16 = star_frame(w, h, &s, 1.3, 12.0, 62, SW_PIX_U16);
    sw_image f32 = star_frame(w, h, &s, 1.3, 12.0, 62, SW_PIX_F32);
    sw_image u32 = alloc_img(w, h, SW_PIX_U32);
    assert_int_equal(sw_image_convert(cpu, &u16, &u32, 1.0, 0.0, NULL), SW_OK);
    /* The detector's f32 output holds the same whole counts as its u16 output. */
    for (int32_t y = 0; y < h; y++)
        for (int32_t x = 0; x < w; x++)
            assert_true(sw_image_get(&f32, x, y) == sw_image_get(&u16, x, y));
    /* f32 values are rounded to the nearest count: adding 0.3 changes nothing. */
    sw_image f32r = alloc_img(w, h, SW_PIX_F32);
    assert_int_equal(sw_image_convert(cpu, &f32, &f32r, 1.0, 0.3, NULL), SW_OK);
    uint8_t *m = malloc((size_t)w * h);
    assert_non_null(m);
    memset(m, 1, (size_t)w * h);
    /* S: a block over the brightest star, a column, scattered pixels. */
    int64_t bright = 0;
    for (int64_t i = 1; i < s.count; i++)
        if (s.flux[i] > s.flux[bright])
            bright = i;
    int32_t bx = (int32_t)floor(s.x[bright] + 0.5), by = (int32_t)floor(s.y[bright] + 0.5);
    for (int32_t y = 0; y < h; y++)
        for (int32_t x = 0; x < w; x++) {
            int in_s = (abs(x - bx) <= 1 && abs(y - by) <= 1 && x <= bx) || x == 77 ||
                       (x * 7 + y * 13) % 41 == 0;
            if (in_s) {
                m[(size_t)y * w + x] = 0;
                ((float *)sw_image_row(&f32, y))[x] = (x + y) % 3 == 0   ? INFINITY
                                                      : (x + y) % 3 == 1 ? -INFINITY
                                                                         : NAN;
            }
        }
    for (int a = 0; a < 2; a++) {
        sw_find_params p;
        sw_find_params_default(&p, w, h, SW_PIX_U16);
        p.algorithm = ALGOS[a];
        sw_spot_list ref = find_with(p, &u16);
        assert_true(ref.count >= 20);
        sw_spot_list l32 = find_with(p, &u32);
        assert_lists_equal(&ref, &l32);
        sw_spot_list lr = find_with(p, &f32r);
        assert_lists_equal(&ref, &lr);
        /* Gain map of 2 everywhere == gain 2 (and differs from gain 1). */
        float *gm = malloc((size_t)w * h * sizeof(float));
        assert_non_null(gm);
        for (int i = 0; i < w * h; i++)
            gm[i] = 2.0f;
        sw_find_params pg = p;
        pg.gain = 2.0;
        sw_spot_list lg = find_with(pg, &u16);
        pg.gain = 1.0;
        pg.gain_map = gm;
        sw_spot_list lgm = find_with(pg, &u16);
        assert_lists_equal(&lg, &lgm);
        assert_true(lg.count < ref.count); /* a larger gain asks for more signal */
        free(gm);
        /* NaN / Inf pixels == masked pixels. */
        sw_find_params pm = p;
        pm.mask = m;
        sw_spot_list lm = find_with(pm, &u16);
        sw_spot_list ln = find_with(p, &f32);
        assert_true(lm.count >= 15);
        assert_lists_equal(&lm, &ln);
        /* The masked pixels changed the brightest star's spot. */
        const sw_spot *r0 = spot_at(&ref, s.x[bright], s.y[bright], 1.0);
        const sw_spot *m0 = spot_at(&lm, s.x[bright], s.y[bright], 1.5);
        assert_non_null(r0);
        if (m0)
            assert_true(m0->npix < r0->npix);
        sw_spot_list_free(&ref);
        sw_spot_list_free(&l32);
        sw_spot_list_free(&lr);
        sw_spot_list_free(&lg);
        sw_spot_list_free(&lgm);
        sw_spot_list_free(&lm);
        sw_spot_list_free(&ln);
    }
    free(m);
    sw_image_free(&u16);
    sw_image_free(&u32);
    sw_image_free(&f32);
    sw_image_free(&f32r);
    sw_stars_free(&s);
}

/* ---------------------------------------------------------------- the strong mask */

/* Pixel value as find.h reads it (u16 here) and whether it is valid. */
static double pix(const sw_image *f, const uint8_t *mask, double overload, int32_t x, int32_t y,
                  int *valid)
{
    double v = sw_image_get(f, x, y);
    *valid = v < overload && (!mask || mask[(size_t)y * f->width + x]);
    return v;
}

/* Window sums (m, s, q) over the valid pixels of [x-kx, x+kx] x [y-ky, y+ky], skipping those
 * with skip[i] set (when skip is not NULL). */
static void window_sums(const sw_image *f, const uint8_t *mask, double overload,
                        const uint8_t *skip, int32_t x, int32_t y, int kx, int ky, double *m,
                        double *s, double *q)
{
    *m = *s = *q = 0;
    for (int32_t j = y - ky; j <= y + ky; j++)
        for (int32_t i = x - kx; i <= x + kx; i++) {
            if (i < 0 || j < 0 || i >= f->width || j >= f->height)
                continue;
            if (skip && skip[(size_t)j * f->width + i])
                continue;
            int valid;
            double v = pix(f, mask, overload, i, j, &valid);
            if (!valid)
                continue;
            *m += 1;
            *s += v;
            *q += v * v;
        }
}

/*
 * find.h's thresholds written out pixel by pixel, straight from its text (no summed-area tables,
 * no shared code): the reference the library's strong mask must equal exactly.
 */
static void brute_strong(const sw_find_params *p, const sw_image *f, uint8_t *out)
{
    const int32_t w = f->width, h = f->height;
    const int kx = p->kernel_x, ky = p->kernel_y;
    const double window = (double)((2 * kx + 1) * (2 * ky + 1));
    const double min_count = p->min_local <= 0 ? window : (double)p->min_local;
    const double overload = p->overload > 0 ? p->overload : 65534.0;
    const size_t n = (size_t)w * h;
    uint8_t *disp = calloc(n, 1), *core = calloc(n, 1);
    assert_non_null(disp);
    assert_non_null(core);
    for (int32_t y = 0; y < h; y++)
        for (int32_t x = 0; x < w; x++) {
            size_t i = (size_t)y * w + x;
            double g = p->gain_map ? (double)p->gain_map[i] : p->gain;
            double m, s, q;
            window_sums(f, p->mask, overload, NULL, x, y, kx, ky, &m, &s, &q);
            int valid;
            double v = pix(f, p->mask, overload, x, y, &valid);
            /* background test: m q - s^2 > g s (m - 1 + sigma_b sqrt(2 (m - 1))) */
            int dispersed =
                m >= min_count &&
                m * q - s * s > g * s * (m - 1.0 + p->sigma_background * sqrt(2.0 * (m - 1.0)));
            if (p->algorithm == SW_FIND_DISPERSION) {
                /* strong test: m v - s > sigma_s sqrt(g s m) */
                out[i] = valid && dispersed && v > p->global_threshold &&
                         m * v - s > p->sigma_strong * sqrt(g * s * m);
            } else {
                /* step 1 as DIALS's erosion sees it: invalid pixels count as dispersed */
                disp[i] = !valid || dispersed;
            }
        }
    if (p->algorithm == SW_FIND_DISPERSION) {
        free(disp);
        free(core);
        return;
    }
    /* step 2: d(p) >= k when every pixel of the image within Chebyshev distance k - 1 is in D */
    const int k = kx < ky ? kx : ky;
    for (int32_t y = 0; y < h; y++)
        for (int32_t x = 0; x < w; x++) {
            int valid;
            pix(f, p->mask, overload, x, y, &valid);
            int in = valid && disp[(size_t)y * w + x];
            for (int32_t j = y - (k - 1); in && j <= y + (k - 1); j++)
                for (int32_t i = x - (k - 1); in && i <= x + (k - 1); i++)
                    if (i >= 0 && j >= 0 && i < w && j < h && !disp[(size_t)j * w + i])
                        in = 0;
            core[(size_t)y * w + x] = (uint8_t)in;
        }
    /* steps 3 and 4 */
    for (int32_t y = 0; y < h; y++)
        for (int32_t x = 0; x < w; x++) {
            size_t i = (size_t)y * w + x;
            double g = p->gain_map ? (double)p->gain_map[i] : p->gain;
            double m, s, q;
            window_sums(f, p->mask, overload, core, x, y, kx + 2, ky + 2, &m, &s, &q);
            double mean = m >= 2 ? s / m : 0.0;
            int valid;
            double v = pix(f, p->mask, overload, x, y, &valid);
            out[i] = valid && core[i] && v > p->global_threshold &&
                     v >= mean + p->sigma_strong * sqrt(g * mean);
        }
    free(disp);
    free(core);
}

/* Components of a mask by flood fill (4- or 8-connected), as spots with find.h's moments, in
 * order of their first pixel; filtered as find.h says. */
static sw_spot_list flood_spots(const sw_find_params *p, const sw_image *f, const uint8_t *strong,
                                int64_t *ncomp)
{
    const int32_t w = f->width, h = f->height;
    int32_t *lab = malloc((size_t)w * h * sizeof(int32_t));
    int32_t *stack = malloc((size_t)w * h * sizeof(int32_t));
    assert_non_null(lab);
    assert_non_null(stack);
    for (int64_t i = 0; i < (int64_t)w * h; i++)
        lab[i] = -1;
    sw_spot_list l = {0};
    *ncomp = 0;
    for (int32_t start = 0; start < w * h; start++) {
        if (!strong[start] || lab[start] >= 0)
            continue;
        double s = 0, sx = 0, sy = 0, sxx = 0, syy = 0, peak = -1;
        int64_t npix = 0;
        int32_t x0 = w, x1 = -1, y0 = h, y1 = -1, px = 0, py = 0;
        int64_t top = 0;
        stack[top++] = start;
        lab[start] = (int32_t)*ncomp;
        while (top > 0) {
            int32_t i = stack[--top], x = i % w, y = i / w;
            double v = sw_image_get(f, x, y);
            s += v;
            sx += v * x;
            sy += v * y;
            sxx += v * x * x;
            syy += v * y * y;
            npix++;
            x0 = x < x0 ? x : x0;
            x1 = x > x1 ? x : x1;
            y0 = y < y0 ? y : y0;
            y1 = y > y1 ? y : y1;
            if (v > peak || (v == peak && (y < py || (y == py && x < px)))) {
                peak = v;
                px = x;
                py = y;
            }
            for (int dy = -1; dy <= 1; dy++)
                for (int dx = -1; dx <= 1; dx++) {
                    if ((dx == 0 && dy == 0) || (p->connectivity == 4 && dx != 0 && dy != 0))
                        continue;
                    int32_t nx = x + dx, ny = y + dy;
                    if (nx < 0 || ny < 0 || nx >= w || ny >= h)
                        continue;
                    int32_t j = ny * w + nx;
                    if (strong[j] && lab[j] < 0) {
                        lab[j] = (int32_t)*ncomp;
                        stack[top++] = j;
                    }
                }
        }
        (*ncomp)++;
        sw_spot sp;
        memset(&sp, 0, sizeof sp);
        sp.x = sx / s;
        sp.y = sy / s;
        sp.x_var = (sxx / s - sp.x * sp.x + 1.0 / 12.0) / s;
        sp.y_var = (syy / s - sp.y * sp.y + 1.0 / 12.0) / s;
        sp.intensity = s;
        sp.npix = npix;
        sp.x0 = x0;
        sp.x1 = x1 + 1;
        sp.y0 = y0;
        sp.y1 = y1 + 1;
        sp.z1 = 1;
        sp.peak_x = px;
        sp.peak_y = py;
        sp.peak = peak;
        if (npix < p->min_spot_size || (p->max_spot_size > 0 && npix > p->max_spot_size))
            continue;
        if (p->max_separation > 0 && hypot(px - sp.x, py - sp.y) > p->max_separation)
            continue;
        if (l.count == l.capacity) {
            l.capacity = l.capacity ? 2 * l.capacity : 64;
            l.spots = realloc(l.spots, (size_t)l.capacity * sizeof(sw_spot));
            assert_non_null(l.spots);
        }
        l.spots[l.count++] = sp;
    }
    free(lab);
    free(stack);
    return l;
}

static void assert_spots_close(const sw_spot_list *a, const sw_spot_list *b)
{
    assert_int_equal(a->count, b->count);
    for (int64_t i = 0; i < a->count; i++) {
        const sw_spot *s = &a->spots[i], *t = &b->spots[i];
        assert_int_equal(s->npix, t->npix);
        assert_int_equal(s->x0, t->x0);
        assert_int_equal(s->x1, t->x1);
        assert_int_equal(s->y0, t->y0);
        assert_int_equal(s->y1, t->y1);
        assert_int_equal(s->peak_x, t->peak_x);
        assert_int_equal(s->peak_y, t->peak_y);
        assert_true(s->peak == t->peak);
        assert_true(s->intensity == t->intensity); /* sums of whole counts: exact */
        assert_near(s->x, t->x, 1e-9);
        assert_near(s->y, t->y, 1e-9);
        assert_near(s->x_var, t->x_var, 1e-9 * t->x_var);
        assert_near(s->y_var, t->y_var, 1e-9 * t->y_var);
    }
}

/*
 * The strong mask of sw_find_run equals find.h's thresholds evaluated pixel by pixel, and the
 * spots equal the components of that mask (an independent flood fill): npix, bounding boxes,
 * peaks, sums, centroids and variances. Star fields with a mask, for both algorithms, default
 * parameters and odd ones (a 5 x 9 window, the whole window as min_local, a global threshold, a
 * varying gain map, 8-connectivity, other sigmas).
 */
static void test_strong_mask(void **state)
{
    (void)state;
    const int32_t w = 160, h = 120;
    sw_stars s;
    assert_int_equal(sw_stars_random(cpu, 45, w, h, 4.0, 10.5, 1e6, 0.0, 71, &s), SW_OK);
    sw_image f = star_frame(w, h, &s, 1.25, 8.0, 72, SW_PIX_U16);
    /* A few saturated pixels in the middle of a bright star's core and a dead column. */
    set_px(&f, 40, 50, 65535);
    uint8_t *mask = malloc((size_t)w * h);
    float *gm = malloc((size_t)w * h * sizeof(float));
    uint8_t *want = malloc((size_t)w * h);
    assert_non_null(mask);
    assert_non_null(gm);
    assert_non_null(want);
    for (int32_t y = 0; y < h; y++)
        for (int32_t x = 0; x < w; x++) {
            mask[(size_t)y * w + x] = !(x == 100 || (x > 10 && x < 14 && y > 60 && y < 90));
            gm[(size_t)y * w + x] = 0.8f + 0.4f * (float)((x * 31 + y * 17) % 97) / 97.0f;
        }
    sw_image strong = alloc_img(w, h, SW_PIX_U8);
    for (int a = 0; a < 2; a++) {
        for (int variant = 0; variant < 2; variant++) {
            sw_find_params p;
            sw_find_params_default(&p, w, h, SW_PIX_U16);
            p.algorithm = ALGOS[a];
            p.mask = mask;
            if (variant == 1) {
                p.kernel_x = 2;
                p.kernel_y = 4;
                p.min_local = 0;
                p.sigma_background = 4.0;
                p.sigma_strong = 2.5;
                p.global_threshold = 14.0;
                p.gain_map = gm;
                p.connectivity = 8;
                p.min_spot_size = 2;
                p.max_separation = 3.0;
            }
            sw_find_plan *plan = make_plan(&p);
            sw_spot_list l = {0};
            sw_find_stats st = {0};
            find_one(plan, &f, 0, &l, &strong, &st);
            brute_strong(&p, &f, want);
            int64_t nstrong = 0, diff = 0;
            for (int32_t y = 0; y < h; y++)
                for (int32_t x = 0; x < w; x++) {
                    uint8_t got = ((const uint8_t *)sw_image_row(&strong, y))[x];
                    assert_true(got == 0 || got == 1);
                    diff += got != want[(size_t)y * w + x];
                    nstrong += got;
                }
            if (diff)
                fail_msg("%s, variant %d: %lld pixels of the strong mask differ from find.h's "
                         "thresholds",
                         sw_find_algorithm_string(ALGOS[a]), variant, (long long)diff);
            assert_int_equal(st.strong_pixels, nstrong);
            assert_true(nstrong > 100);
            /* Masked pixels are never strong. */
            for (int32_t y = 0; y < h; y++)
                assert_true(((const uint8_t *)sw_image_row(&strong, y))[100] == 0);
            int64_t ncomp = 0;
            sw_spot_list ref = flood_spots(&p, &f, want, &ncomp);
            assert_int_equal(st.components, ncomp);
            assert_true(ref.count >= 15);
            assert_spots_close(&l, &ref);
            assert_int_equal(st.spots, l.count);
            assert_int_equal(
                st.spots + st.rejected_small + st.rejected_large + st.rejected_separation, ncomp);
            /* A plan keeps nothing from one frame to the next: after other frames (noise,
             * then noise with bright squares along the top row and the left column), the same
             * frame gives the same mask and spots. */
            sw_image other = star_frame(w, h, NULL, 1.0, 30.0, 73, SW_PIX_U16);
            sw_image strong2 = alloc_img(w, h, SW_PIX_U8);
            sw_spot_list scratch = {0};
            find_one(plan, &other, 1, &scratch, NULL, NULL);
            for (int32_t k = 1; k < 16; k++) {
                if (10 * k + 1 < w)
                    put_square(&other, 10 * k, 1);
                if (8 * k + 1 < h)
                    put_square(&other, 1, 8 * k);
            }
            find_one(plan, &other, 2, &scratch, NULL, NULL);
            sw_spot_list l2 = {0};
            find_one(plan, &f, 0, &l2, &strong2, NULL);
            if (!sw_image_equal(&strong, &strong2))
                fail_msg("%s, variant %d: the strong mask of a frame changed after the plan "
                         "ran other frames",
                         sw_find_algorithm_string(ALGOS[a]), variant);
            assert_lists_equal(&l, &l2);
            sw_spot_list_free(&l2);
            sw_spot_list_free(&scratch);
            sw_image_free(&other);
            sw_image_free(&strong2);
            sw_spot_list_free(&ref);
            sw_spot_list_free(&l);
            sw_find_destroy(plan);
        }
    }
    sw_image_free(&strong);
    sw_image_free(&f);
    free(mask);
    free(gm);
    free(want);
    sw_stars_free(&s);
}

/* The CPU result does not depend on the number of threads (labelling strips, OpenMP sums):
 * 1, 2 and 3 threads give the same masks, spots and stats on a frame whose spots cross many
 * row strips. */
static void test_thread_count(void **state)
{
    (void)state;
    const int32_t w = 300, h = 400;
    sw_image f = alloc_img(w, h, SW_PIX_U16);
    {
        sw_stars s;
        assert_int_equal(sw_stars_random(cpu, 150, w, h, 3.0, 10.0, 1e6, 0.0, 81, &s), SW_OK);
        sw_image_free(&f);
        f = star_frame(w, h, &s, 1.4, 10.0, 82, SW_PIX_U16);
        sw_stars_free(&s);
    }
    for (int a = 0; a < 2; a++)
        for (int conn = 4; conn <= 8; conn += 4) {
            sw_find_params p;
            sw_find_params_default(&p, w, h, SW_PIX_U16);
            p.algorithm = ALGOS[a];
            p.connectivity = conn;
            p.max_spot_size = 0;
            p.max_separation = 0;
            sw_spot_list ref = {0};
            sw_find_stats ref_st = {0};
            sw_image ref_mask = alloc_img(w, h, SW_PIX_U8);
            for (int threads = 1; threads <= 3; threads++) {
                sw_context *ctx = sw_test_cpu_context(threads);
                sw_find_plan *plan = NULL;
                assert_int_equal(sw_find_create(ctx, &p, &plan), SW_OK);
                sw_spot_list l = {0};
                sw_find_stats st = {0};
                sw_image mask = alloc_img(w, h, SW_PIX_U8);
                assert_int_equal(sw_find_run(plan, &f, 0, &l, &mask, &st), SW_OK);
                if (threads == 1) {
                    ref = l;
                    ref_st = st;
                    assert_int_equal(sw_image_copy(NULL, &mask, &ref_mask), SW_OK);
                    assert_true(ref.count > 50);
                } else {
                    assert_true(sw_image_equal(&mask, &ref_mask));
                    assert_memory_equal(&st, &ref_st, sizeof st);
                    assert_lists_equal(&ref, &l);
                    sw_spot_list_free(&l);
                }
                sw_image_free(&mask);
                sw_find_destroy(plan);
                sw_context_destroy(ctx);
            }
            sw_spot_list_free(&ref);
            sw_image_free(&ref_mask);
        }
    sw_image_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_planted_stars),     cmocka_unit_test(test_centroid_noise),
        cmocka_unit_test(test_background_only),   cmocka_unit_test(test_run_vs_sequence),
        cmocka_unit_test(test_three_d),           cmocka_unit_test(test_sequence_failures),
        cmocka_unit_test(test_filter_size_small), cmocka_unit_test(test_filter_size_large),
        cmocka_unit_test(test_filter_separation), cmocka_unit_test(test_strong_fraction),
        cmocka_unit_test(test_bad_params),        cmocka_unit_test(test_bad_frames),
        cmocka_unit_test(test_types_nan_gain),    cmocka_unit_test(test_strong_mask),
        cmocka_unit_test(test_thread_count),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

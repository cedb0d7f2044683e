/*
 * The centroid stage's methods, error bars and status codes on the CPU (centroid.h "Methods",
 * "Error bars", "Status"; src/centroid/centroid_method.h):
 *   - Monte Carlo over noise realisations (Poisson + read noise from the spotwave RNG, sim/noise.h)
 *     of pixel-integrated Gaussian spots at many sub-pixel phases, three SNRs: bias and scatter of
 *     every point-source method (printed: the accuracy table), the reported sigma within 10 % of
 *     the measured scatter for CoG and the weighted CoG (fixed and re-centred);
 *   - the fixed weighted CoG's response s^2 / (s^2 + s0^2) to a displacement; the re-centred one
 *     unbiased; local background, brightest-N on a sky;
 *   - correlation recovers known sub-pixel shifts of an extended scene (a sum of random plane
 *     waves, shifted exactly);
 *   - quad-cell: the analytic response g erf(d / (sqrt(2) s0)) of a Gaussian spot, on 2 x 2 and
 *     8 x 8 regions;
 *   - status: spots pushed out of their region, cut by its edge, saturated, below the SNR limit,
 *     masked, empty, a NaN pixel;
 *   - the generic CoG equals the fast CoG; the fast path's error bars are NaN;
 *   - bad method parameters refused with messages.
 */
#include "testutil.h"

#include "sim/noise.h"
#include "spotwave/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SQRT2 1.4142135623730951
#define PI    3.14159265358979323846

static sw_context *cpu;

static int setup(void **state)
{
    (void)state;
    cpu = sw_test_cpu_context(0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sw_context_destroy(cpu);
    return 0;
}

/* ------------------------------------------------------------------ helpers */

#define PITCH 16
#define NL    8 /* lenslets per side */
#define W     (PITCH * NL)

/* Fraction of a unit Gaussian (centre c, r.m.s. s) falling in pixel [i - 0.5, i + 0.5). */
static double pix_frac(double i, double c, double s)
{
    return 0.5 * (erf((i + 0.5 - c) / (SQRT2 * s)) - erf((i - 0.5 - c) / (SQRT2 * s)));
}

/* Adds a pixel-integrated Gaussian spot of `flux` to a w x h f32 image. */
static void add_spot(float *img, int w, int h, double cx, double cy, double s, double flux)
{
    int x0 = (int)floor(cx - 6 * s), x1 = (int)ceil(cx + 6 * s);
    int y0 = (int)floor(cy - 6 * s), y1 = (int)ceil(cy + 6 * s);
    for (int y = y0 < 0 ? 0 : y0; y <= y1 && y < h; y++) {
        double fy = pix_frac(y, cy, s);
        for (int x = x0 < 0 ? 0 : x0; x <= x1 && x < w; x++)
            img[(size_t)y * w + x] += (float)(flux * fy * pix_frac(x, cx, s));
    }
}

/* Poisson(mean e-) + N(0, rn) per pixel, gain 1 e-/ADU (values in ADU = e-). */
static void add_noise(float *img, size_t n, double rn, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        double e = sw_noise_poisson((double)img[i], seed, i);
        img[i] = (float)(e + rn * sw_noise_normal(seed, i));
    }
}

static double uniform(uint64_t seed, uint64_t i)
{
    sw_rng4 r = sw_rng_draw(seed, SW_RNG_STREAM_TEST, i);
    return sw_rng_u01(r.v[0], r.v[1]);
}

static void grid_params(sw_centroid_params *p, int pitch, int nl, sw_pixel_type t, int frames)
{
    sw_centroid_params_default(p);
    p->geometry.x0 = 0;
    p->geometry.y0 = 0;
    p->geometry.pitch_px = pitch;
    p->geometry.nx = nl;
    p->geometry.ny = nl;
    p->width = pitch * nl;
    p->height = pitch * nl;
    p->type = t;
    p->max_frames = frames;
}

static sw_centroid_plan *make_plan(const sw_centroid_params *p)
{
    sw_centroid_plan *plan = NULL;
    sw_status st = sw_centroid_create(cpu, p, &plan);
    if (st != SW_OK)
        fail_msg("sw_centroid_create: %s (%s)", sw_status_string(st), sw_context_error(cpu));
    return plan;
}

static void run_f32(sw_centroid_plan *plan, float *data, int w, int h, sw_centroid_result *r)
{
    sw_image img;
    assert_int_equal(sw_image_wrap(data, w, h, 0, SW_PIX_F32, SW_MEM_HOST, &img), SW_OK);
    sw_status st = sw_centroid_run(plan, &img, r);
    if (st != SW_OK)
        fail_msg("sw_centroid_run: %s", sw_context_error(cpu));
}

static double ref_x(int ix)
{
    sw_sh_geometry g;
    sw_sh_geometry_default(&g);
    g.x0 = 0;
    g.pitch_px = PITCH;
    double x, y;
    sw_sh_reference(&g, ix, 0, &x, &y);
    return x;
}

/* ------------------------------------------------------------------ Monte Carlo */

#define MC_FRAMES 120
#define MC_BATCH  40

typedef struct mc_case {
    const char *name;
    sw_centroid_method method;
    double fwhm;
    int iters, n;
    int check_sigma; /* 1: reported sigma within 10 % of the scatter */
    double max_bias; /* rms bias bound at the highest SNR, px (< 0: the fixed-WCOG response) */
} mc_case;

/*
 * One SNR: MC_FRAMES frames of NL x NL spots (r.m.s. 1.5 px) at sub-pixel phases in
 * [-0.5, 0.5)^2 about each reference, Poisson + read noise 3 e-, gain 1; every method of cases
 * on the same frames.
 */
static void monte_carlo(double flux, double sky, const mc_case *cases, int ncases, uint64_t seed)
{
    const double s0 = 1.5, rn = 3.0;
    const size_t npix = (size_t)W * W;
    const int nl = NL * NL;
    float *frames = malloc((size_t)MC_FRAMES * npix * sizeof(float));
    double *tx = malloc((size_t)nl * sizeof(double)), *ty = malloc((size_t)nl * sizeof(double));
    assert_non_null(frames);
    for (int l = 0; l < nl; l++) {
        tx[l] = ref_x(l % NL) + uniform(seed, 2 * (uint64_t)l) - 0.5;
        ty[l] = ref_x(l / NL) + uniform(seed, 2 * (uint64_t)l + 1) - 0.5;
    }
    for (int f = 0; f < MC_FRAMES; f++) {
        float *img = frames + (size_t)f * npix;
        for (size_t i = 0; i < npix; i++)
            img[i] = (float)sky;
        for (int l = 0; l < nl; l++)
            add_spot(img, W, W, tx[l], ty[l], s0, flux);
        add_noise(img, npix, rn, seed * 1000 + (uint64_t)f + 1);
    }
    for (int c = 0; c < ncases; c++) {
        sw_centroid_params p;
        grid_params(&p, PITCH, NL, SW_PIX_F32, MC_BATCH);
        p.method = cases[c].method;
        p.fwhm_px = cases[c].fwhm;
        p.wcog_iterations = cases[c].iters;
        p.brightest_n = cases[c].n;
        p.gain_e_per_adu = 1.0;
        p.read_noise_e = rn;
        sw_centroid_plan *plan = make_plan(&p);
        assert_int_equal(sw_centroid_plan_fast(plan), 0);
        sw_centroid_result r;
        assert_int_equal(sw_centroid_result_alloc(plan, MC_BATCH, SW_MEM_HOST, &r), SW_OK);
        double *sx = calloc((size_t)nl, sizeof(double)), *sxx = calloc((size_t)nl, sizeof(double));
        double *sv = calloc((size_t)nl, sizeof(double));
        double snr = 0.0;
        int nvalid = 0;
        for (int f0 = 0; f0 < MC_FRAMES; f0 += MC_BATCH) {
            run_f32(plan, frames + (size_t)f0 * npix, W, W * MC_BATCH, &r);
            for (int f = 0; f < MC_BATCH; f++)
                for (int l = 0; l < nl; l++) {
                    size_t i = (size_t)f * nl + l;
                    assert_int_equal(r.valid[i], 1);
                    double e = r.x[i] - tx[l];
                    sx[l] += e;
                    sxx[l] += e * e;
                    sv[l] += r.x_var[i];
                    snr += r.snr[i];
                    nvalid++;
                }
        }
        /* rms over lenslets of: the mean error (bias), the scatter, the reported sigma */
        double b2 = 0.0, sc2 = 0.0, rep2 = 0.0, ratio = 0.0;
        for (int l = 0; l < nl; l++) {
            double m = sx[l] / MC_FRAMES;
            double var = (sxx[l] - MC_FRAMES * m * m) / (MC_FRAMES - 1);
            b2 += m * m;
            sc2 += var;
            rep2 += sv[l] / MC_FRAMES;
            ratio += sqrt(sv[l] / MC_FRAMES / var);
        }
        double bias = sqrt(b2 / nl), scatter = sqrt(sc2 / nl), rep = sqrt(rep2 / nl);
        ratio /= nl;
        print_message("| %-22s | %7.0f | %6.1f | %7.4f | %7.4f | %7.4f | %5.2f |\n", cases[c].name,
                      flux, snr / nvalid, bias, scatter, rep, rep / scatter);
        if (cases[c].check_sigma && fabs(rep / scatter - 1.0) > 0.10)
            fail_msg("%s at flux %g: reported sigma %.4f px, measured scatter %.4f px (more than "
                     "10 %% apart)",
                     cases[c].name, flux, rep, scatter);
        if (cases[c].max_bias > 0 && bias > cases[c].max_bias + 3 * scatter / sqrt(MC_FRAMES))
            fail_msg("%s at flux %g: rms bias %.4f px above %.4f", cases[c].name, flux, bias,
                     cases[c].max_bias);
        free(sx);
        free(sxx);
        free(sv);
        sw_centroid_result_free(&r);
        sw_centroid_destroy(plan);
    }
    free(frames);
    free(tx);
    free(ty);
}

static void test_monte_carlo(void **state)
{
    (void)state;
    static const mc_case cases[] = {
        {"cog", SW_CENTROID_METHOD_COG, 0, 0, 0, 1, 0.01},
        {"wcog fixed fwhm 4.7", SW_CENTROID_METHOD_WCOG, 2.0 * 2.354820045, 0, 0, 1, -1},
        {"wcog 5 iter fwhm 4.7", SW_CENTROID_METHOD_WCOG, 2.0 * 2.354820045, 5, 0, 1, 0.02},
        {"local k=3", SW_CENTROID_METHOD_LOCAL, 0, 0, 0, 0, 0.03},
        {"brightest 20", SW_CENTROID_METHOD_BRIGHTEST, 0, 0, 20, 0, 0.08},
        {"quadcell fwhm 3.53", SW_CENTROID_METHOD_QUADCELL, 1.5 * 2.354820045, 0, 0, 0, 0.3},
    };
    print_message("| method                 |  flux e | SNR    | bias px | scatter | rep. s  | "
                  "ratio |\n");
    monte_carlo(400.0, 0.0, cases, 6, 11);
    monte_carlo(2000.0, 0.0, cases, 6, 12);
    monte_carlo(20000.0, 0.0, cases, 6, 13);
}

/* The fixed weight's response and the re-centred weight's, noiseless. */
static void test_wcog_response(void **state)
{
    (void)state;
    const double s0 = 1.5, sw = 2.0;
    float *img = calloc((size_t)W * W, sizeof(float));
    double d[NL * NL];
    for (int l = 0; l < NL * NL; l++) {
        d[l] = -1.0 + 2.0 * l / (NL * NL - 1.0);
        add_spot(img, W, W, ref_x(l % NL) + d[l], ref_x(l / NL), s0, 1000.0);
    }
    for (int iters = 0; iters <= 8; iters += 8) {
        sw_centroid_params p;
        grid_params(&p, PITCH, NL, SW_PIX_F32, 1);
        p.method = SW_CENTROID_METHOD_WCOG;
        p.fwhm_px = sw * 2.354820045030949;
        p.wcog_iterations = iters;
        sw_centroid_plan *plan = make_plan(&p);
        sw_centroid_result r;
        assert_int_equal(sw_centroid_result_alloc(plan, 1, SW_MEM_HOST, &r), SW_OK);
        run_f32(plan, img, W, W, &r);
        /* pixel-integrated spot: r.m.s. width^2 = s0^2 + 1/12 */
        const double g = sw * sw / (sw * sw + s0 * s0 + 1.0 / 12.0);
        for (int l = 0; l < NL * NL; l++) {
            assert_int_equal(r.status[l], SW_CENTROID_OK);
            double got = r.x[l] - ref_x(l % NL);
            if (iters == 0)
                assert_near(got, g * d[l], 0.01);
            else
                assert_near(got, d[l], 0.005);
            assert_near(r.y[l], ref_x(l / NL), 1e-4);
        }
        sw_centroid_result_free(&r);
        sw_centroid_destroy(plan);
    }
    free(img);
}

/* LOCAL and BRIGHTEST on a sky of 50 e-/px: the plain CoG is pulled to the region's centre. */
static void test_local_sky(void **state)
{
    (void)state;
    float *img = malloc((size_t)W * W * sizeof(float));
    for (size_t i = 0; i < (size_t)W * W; i++)
        img[i] = 50.0f;
    double d[NL * NL];
    for (int l = 0; l < NL * NL; l++) {
        d[l] = 2.0 * (uniform(5, (uint64_t)l) - 0.5) * 3.0;
        add_spot(img, W, W, ref_x(l % NL) + d[l], ref_x(l / NL), 1.2, 5000.0);
    }
    add_noise(img, (size_t)W * W, 2.0, 77);
    const sw_centroid_method ms[3] = {SW_CENTROID_METHOD_COG, SW_CENTROID_METHOD_LOCAL,
                                      SW_CENTROID_METHOD_BRIGHTEST};
    double rms[3];
    for (int k = 0; k < 3; k++) {
        sw_centroid_params p;
        grid_params(&p, PITCH, NL, SW_PIX_F32, 1);
        p.method = ms[k];
        p.brightest_n = 16;
        p.gain_e_per_adu = 1.0;
        sw_centroid_plan *plan = make_plan(&p);
        sw_centroid_result r;
        assert_int_equal(sw_centroid_result_alloc(plan, 1, SW_MEM_HOST, &r), SW_OK);
        run_f32(plan, img, W, W, &r);
        double s2 = 0;
        for (int l = 0; l < NL * NL; l++) {
            double e = r.x[l] - ref_x(l % NL) - d[l];
            s2 += e * e;
        }
        rms[k] = sqrt(s2 / (NL * NL));
        sw_centroid_result_free(&r);
        sw_centroid_destroy(plan);
    }
    free(img);
    print_message("sky 50 e-/px: rms error cog %.3f, local %.3f, brightest-16 %.3f px\n", rms[0],
                  rms[1], rms[2]);
    assert_true(rms[0] > 0.5); /* the sky pulls the plain CoG by ~ d * sky share */
    assert_true(rms[1] < 0.05);
    assert_true(rms[2] < 0.1);
}

/* BRIGHTEST's cut, the (N + 1)-th largest value, against a sort, on regions full of ties (integer
 * values 0..39 and a spot): small N take the top-16 list, N + 1 > 16 the bisection on the keys
 * (centroid_method.h sw_cmb_select); N >= n takes the smallest value. */
static int desc(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

static void test_brightest_select(void **state)
{
    (void)state;
    float *img = malloc((size_t)W * W * sizeof(float));
    assert_non_null(img);
    for (int i = 0; i < W * W; i++)
        img[i] = (float)floor(40.0 * uniform(21, (uint64_t)i));
    for (int l = 0; l < NL * NL; l++)
        add_spot(img, W, W, ref_x(l % NL) + 0.3, ref_x(l / NL) - 0.2, 1.5, 400.0);
    static const int ns[7] = {1, 4, 9, 15, 16, 40, 300};
    for (int c = 0; c < 7; c++) {
        sw_centroid_params p;
        grid_params(&p, PITCH, NL, SW_PIX_F32, 1);
        p.method = SW_CENTROID_METHOD_BRIGHTEST;
        p.brightest_n = ns[c];
        sw_centroid_plan *plan = make_plan(&p);
        sw_centroid_result r;
        assert_int_equal(sw_centroid_result_alloc(plan, 1, SW_MEM_HOST, &r), SW_OK);
        run_f32(plan, img, W, W, &r);
        for (int l = 0; l < NL * NL; l++) {
            const int xs = (l % NL) * PITCH, ys = (l / NL) * PITCH, n = PITCH * PITCH;
            float v[PITCH * PITCH];
            for (int j = 0; j < PITCH; j++)
                for (int i = 0; i < PITCH; i++)
                    v[j * PITCH + i] = img[(size_t)(ys + j) * W + xs + i];
            float sorted[PITCH * PITCH];
            memcpy(sorted, v, sizeof sorted);
            qsort(sorted, (size_t)n, sizeof(float), desc);
            const int m = ns[c] + 1 < n ? ns[c] + 1 : n;
            const double b = sorted[m - 1];
            double s0 = 0, sx = 0, sy = 0;
            for (int q = 0; q < n; q++) {
                const double e = v[q] > b ? v[q] - b : 0.0;
                s0 += e;
                sx += e * (q % PITCH);
                sy += e * (q / PITCH);
            }
            if (!(s0 > 0)) {
                assert_int_equal(r.status[l], SW_CENTROID_EMPTY);
                continue;
            }
            if (r.status[l] != SW_CENTROID_OK)
                fail_msg("N %d, lenslet %d: status %d", ns[c], l, r.status[l]);
            assert_near(r.x[l], xs + sx / s0, 1e-4);
            assert_near(r.y[l], ys + sy / s0, 1e-4);
        }
        sw_centroid_result_free(&r);
        sw_centroid_destroy(plan);
    }
    free(img);
}

/* ------------------------------------------------------------------ correlation */

/* An extended scene: a sum of 40 random plane waves (periods 5..20 px), evaluated exactly. */
static double scene(double x, double y)
{
    double v = 0.0;
    for (int k = 0; k < 40; k++) {
        double per = 5.0 + 15.0 * uniform(91, 3 * (uint64_t)k);
        double ang = 2 * PI * uniform(91, 3 * (uint64_t)k + 1);
        double ph = 2 * PI * uniform(91, 3 * (uint64_t)k + 2);
        v += cos(2 * PI / per * (x * cos(ang) + y * sin(ang)) + ph);
    }
    return 100.0 + 8.0 * v;
}

static void test_correlation_shift(void **state)
{
    (void)state;
    const int pitch = 24, nl = 5, w = pitch * nl;
    float *ref = malloc((size_t)w * w * sizeof(float)),
          *img = malloc((size_t)w * w * sizeof(float));
    double sx[25], sy[25];
    for (int l = 0; l < nl * nl; l++) {
        sx[l] = 4.0 * (uniform(3, 2 * (uint64_t)l) - 0.5);
        sy[l] = 4.0 * (uniform(3, 2 * (uint64_t)l + 1) - 0.5);
    }
    for (int y = 0; y < w; y++)
        for (int x = 0; x < w; x++) {
            int l = (y / pitch) * nl + x / pitch;
            ref[(size_t)y * w + x] = (float)scene(x, y);
            img[(size_t)y * w + x] = (float)(0.7 * scene(x - sx[l], y - sy[l]) + 20.0);
        }
    sw_centroid_params p;
    grid_params(&p, pitch, nl, SW_PIX_F32, 1);
    p.method = SW_CENTROID_METHOD_CORRELATION;
    p.corr_reference = ref;
    p.corr_search_px = 4;
    p.gain_e_per_adu = 1.0;
    p.read_noise_e = 1.0;
    sw_centroid_plan *plan = make_plan(&p);
    sw_centroid_result r;
    assert_int_equal(sw_centroid_result_alloc(plan, 1, SW_MEM_HOST, &r), SW_OK);
    run_f32(plan, img, w, w, &r);
    double e2 = 0, emax = 0;
    for (int l = 0; l < nl * nl; l++) {
        assert_int_equal(r.status[l], SW_CENTROID_OK);
        double rx, ry;
        sw_sh_reference(&p.geometry, l % nl, l / nl, &rx, &ry);
        double ex = r.slopes[l] - sx[l], ey = r.slopes[nl * nl + l] - sy[l];
        assert_near(r.x[l], rx + r.slopes[l], 1e-4);
        e2 += ex * ex + ey * ey;
        emax = fmax(emax, fmax(fabs(ex), fabs(ey)));
        assert_true(r.x_var[l] > 0 && r.x_var[l] < 0.01);
    }
    print_message("correlation: rms error %.4f px, max %.4f px over %d shifts in [-2, 2]\n",
                  sqrt(e2 / (2 * nl * nl)), emax, nl * nl);
    assert_true(sqrt(e2 / (2 * nl * nl)) < 0.08);
    assert_true(emax < 0.2);
    /* a spot template and the spot 6.3 px away, beyond the search range: the maximum on its
     * edge, LEFT */
    memset(ref, 0, (size_t)w * w * sizeof(float));
    memset(img, 0, (size_t)w * w * sizeof(float));
    for (int l = 0; l < nl * nl; l++) {
        double rx, ry;
        sw_sh_reference(&p.geometry, l % nl, l / nl, &rx, &ry);
        add_spot(ref, w, w, rx, ry, 2.0, 1000.0);
        add_spot(img, w, w, rx + 6.3, ry - 1.0, 2.0, 1000.0);
    }
    sw_centroid_destroy(plan);
    plan = make_plan(&p);
    run_f32(plan, img, w, w, &r);
    for (int l = 0; l < nl * nl; l++)
        assert_int_equal(r.status[l], SW_CENTROID_LEFT);
    sw_centroid_result_free(&r);
    sw_centroid_destroy(plan);
    free(ref);
    free(img);
}

/* ------------------------------------------------------------------ quad-cell */

static void quad_case(int pitch, double s0, double dmax)
{
    const int nl = 4, w = pitch * nl;
    float *img = calloc((size_t)w * w, sizeof(float));
    double d[16];
    for (int l = 0; l < nl * nl; l++) {
        double rx, ry;
        sw_sh_geometry g = {0, 0, pitch, nl, nl, 5.5, 3.5, NULL};
        sw_sh_reference(&g, l % nl, l / nl, &rx, &ry);
        d[l] = -dmax + 2.0 * dmax * l / (nl * nl - 1.0);
        add_spot(img, w, w, rx + d[l], ry - 0.5 * d[l], s0, 1e4);
    }
    sw_centroid_params p;
    grid_params(&p, pitch, nl, SW_PIX_F32, 1);
    p.method = SW_CENTROID_METHOD_QUADCELL;
    p.fwhm_px = s0 * 2.354820045030949;
    sw_centroid_plan *plan = make_plan(&p);
    sw_centroid_result r;
    assert_int_equal(sw_centroid_result_alloc(plan, 1, SW_MEM_HOST, &r), SW_OK);
    run_f32(plan, img, w, w, &r);
    const double g = sqrt(PI / 2.0) * s0;
    for (int l = 0; l < nl * nl; l++) {
        double rx, ry;
        sw_sh_reference(&p.geometry, l % nl, l / nl, &rx, &ry);
        assert_near(r.x[l] - rx, g * erf(d[l] / (SQRT2 * s0)), 2e-3 * g);
        assert_near(r.y[l] - ry, g * erf(-0.5 * d[l] / (SQRT2 * s0)), 2e-3 * g);
    }
    sw_centroid_result_free(&r);
    sw_centroid_destroy(plan);
    free(img);
}

static void test_quadcell(void **state)
{
    (void)state;
    quad_case(2, 0.25, 0.2); /* 2 x 2 pixels, each a quadrant */
    quad_case(8, 1.0, 1.0);  /* 4 x 4 pixel quadrants */
    /* unit response at the centre */
    quad_case(8, 1.0, 0.01);
}

/* ------------------------------------------------------------------ status */

static sw_centroid_result run_status(sw_centroid_params *p, float *img, sw_centroid_plan **planp)
{
    *planp = make_plan(p);
    sw_centroid_result r;
    assert_int_equal(sw_centroid_result_alloc(*planp, 1, SW_MEM_HOST, &r), SW_OK);
    run_f32(*planp, img, W, W, &r);
    return r;
}

static void test_status(void **state)
{
    (void)state;
    float *img = malloc((size_t)W * W * sizeof(float));
    for (size_t i = 0; i < (size_t)W * W; i++)
        img[i] = 10.0f;
    /* row 0: centred spots; lenslet 1: at +5.8 (cut: 16 % of the flux on the ring column);
     * lenslet 2: at +7.4 (peak on the ring; lenslet 3 gets part of it on its ring: cut);
     * lenslet 4's spot moved +10 px into lenslet 5 (4 sees
     * a wing on its ring, 5 two spots); lenslet 6: faint; lenslet 7: empty-ish (sky only) */
    for (int ix = 0; ix < NL; ix++) {
        double off = ix == 1 ? 5.8 : ix == 2 ? 7.4 : ix == 4 ? 10.0 : 0.0;
        double flux = ix == 6 ? 60.0 : ix == 7 ? 0.0 : 5000.0;
        if (flux > 0)
            add_spot(img, W, W, ref_x(ix) + off, ref_x(0), 1.5, flux);
    }
    /* row 1, lenslet 0: a NaN pixel */
    add_noise(img, (size_t)W * W, 2.0, 5);
    img[(size_t)(PITCH + 3) * W + 3] = NAN;

    sw_centroid_params p;
    grid_params(&p, PITCH, NL, SW_PIX_F32, 1);
    p.method = SW_CENTROID_METHOD_LOCAL;
    p.gain_e_per_adu = 1.0;
    p.read_noise_e = 2.0;
    p.min_snr = 10.0;
    p.max_shift_px = 3.0;
    p.peak_border = 1;
    p.edge_fraction = 0.05;
    p.saturation = 3000.0; /* f32: a level makes the centred spots' peaks (~350) fine */
    uint8_t mask[NL * NL];
    memset(mask, 1, sizeof mask);
    mask[2 * NL + 5] = 0;
    p.geometry.valid = mask;
    sw_centroid_plan *plan;
    sw_centroid_result r = run_status(&p, img, &plan);
    const int expect[NL] = {SW_CENTROID_OK,    SW_CENTROID_LEFT, SW_CENTROID_LEFT,
                            SW_CENTROID_CUT,   SW_CENTROID_LEFT, SW_CENTROID_LEFT,
                            SW_CENTROID_FAINT, SW_CENTROID_EMPTY};
    for (int ix = 0; ix < NL; ix++) {
        if (ix == 7 && r.status[ix] == SW_CENTROID_FAINT)
            continue; /* sky noise can leave a few pixels above k sigma: faint, not empty */
        if (ix == 5 && r.status[ix] == SW_CENTROID_CUT)
            continue; /* the intruder 6 px left of the reference touches the ring too */
        if (r.status[ix] != expect[ix])
            fail_msg("lenslet %d: status %s, expected %s (x %g, snr %g)", ix,
                     sw_centroid_status_string(r.status[ix]), sw_centroid_status_string(expect[ix]),
                     (double)r.x[ix], (double)r.snr[ix]);
        assert_int_equal(r.valid[ix], expect[ix] == SW_CENTROID_OK);
        if (!r.valid[ix])
            assert_true(isnan(r.x[ix]) && isnan(r.x_var[ix]));
    }
    assert_int_equal(r.status[NL], SW_CENTROID_NONFINITE);
    assert_int_equal(r.status[2 * NL + 5], SW_CENTROID_MASKED);
    assert_int_equal(r.valid[2 * NL + 5], 0);
    sw_centroid_result_free(&r);
    sw_centroid_destroy(plan);

    /* no shift limit: the spot at +5.8 is cut (16 % of its flux on the ring), not left */
    p.max_shift_px = 0.0;
    r = run_status(&p, img, &plan);
    assert_int_equal(r.status[1], SW_CENTROID_CUT);
    assert_int_equal(r.status[2], SW_CENTROID_LEFT); /* peak on the ring */
    assert_int_equal(r.status[0], SW_CENTROID_OK);
    sw_centroid_result_free(&r);
    sw_centroid_destroy(plan);

    /* edge_px instead of the ring fraction: the spot at +5.8 is 2.2 px from the edge */
    p.edge_fraction = 0.0;
    p.edge_px = 2.5;
    r = run_status(&p, img, &plan);
    assert_int_equal(r.status[1], SW_CENTROID_CUT);
    assert_int_equal(r.status[0], SW_CENTROID_OK);
    sw_centroid_result_free(&r);
    sw_centroid_destroy(plan);

    /* saturation: a level under the centred spots' peak; kept valid, or dropped */
    p.edge_px = 0.0;
    p.max_shift_px = 3.0;
    p.saturation = 200.0;
    for (int drop = 0; drop <= 1; drop++) {
        p.drop_saturated = drop;
        r = run_status(&p, img, &plan);
        assert_int_equal(r.status[0], SW_CENTROID_SATURATED);
        assert_int_equal(r.saturated[0], 1);
        assert_int_equal(r.valid[0], !drop);
        assert_int_equal(r.status[1], SW_CENTROID_LEFT); /* a worse status first */
        sw_centroid_result_free(&r);
        sw_centroid_destroy(plan);
    }
    free(img);
}

/* The generic CoG equals the fast one; the fast one reports no error bars. */
static void test_generic_equals_fast(void **state)
{
    (void)state;
    sw_image img = sw_test_random_image(W, W, SW_PIX_U8, 42);
    sw_centroid_params p;
    grid_params(&p, PITCH, NL, SW_PIX_U8, 1);
    p.window = 1;
    sw_centroid_plan *fast = make_plan(&p);
    assert_int_equal(sw_centroid_plan_fast(fast), 1);
    p.gain_e_per_adu = 2.0; /* error bars: the generic path */
    sw_centroid_plan *gen = make_plan(&p);
    assert_int_equal(sw_centroid_plan_fast(gen), 0);
    sw_centroid_result a, b;
    assert_int_equal(sw_centroid_result_alloc(fast, 1, SW_MEM_HOST, &a), SW_OK);
    assert_int_equal(sw_centroid_result_alloc(gen, 1, SW_MEM_HOST, &b), SW_OK);
    assert_int_equal(sw_centroid_run(fast, &img, &a), SW_OK);
    assert_int_equal(sw_centroid_run(gen, &img, &b), SW_OK);
    for (int l = 0; l < NL * NL; l++) {
        assert_near(a.x[l], b.x[l], 1e-4);
        assert_near(a.y[l], b.y[l], 1e-4);
        assert_near(a.intensity[l], b.intensity[l], 1e-3 * a.intensity[l]);
        assert_int_equal(a.valid[l], b.valid[l]);
        assert_int_equal(a.saturated[l], b.saturated[l]);
        assert_int_equal(a.status[l], b.status[l]);
        assert_true(isnan(a.x_var[l]) && isnan(a.snr[l]));
        assert_true(b.x_var[l] > 0 && b.y_var[l] > 0 && b.snr[l] > 0);
        assert_near(a.slopes[l], b.slopes[l], 1e-4);
    }
    sw_centroid_result_free(&a);
    sw_centroid_result_free(&b);
    sw_centroid_destroy(fast);
    sw_centroid_destroy(gen);
    sw_image_free(&img);
}

/* ------------------------------------------------------------------ bad input */

static void expect_refused(const sw_centroid_params *p, sw_status want, const char *needle)
{
    sw_centroid_plan *plan = (sw_centroid_plan *)1;
    sw_status st = sw_centroid_create(cpu, p, &plan);
    if (st != want)
        fail_msg("expected %s, got %s (%s)", sw_status_string(want), sw_status_string(st),
                 sw_context_error(cpu));
    assert_null(plan);
    if (!strstr(sw_context_error(cpu), needle))
        fail_msg("message '%s' does not mention '%s'", sw_context_error(cpu), needle);
}

static void test_bad_params(void **state)
{
    (void)state;
    sw_centroid_params p;
    float *ref = calloc((size_t)W * W, sizeof(float));
    grid_params(&p, PITCH, NL, SW_PIX_F32, 1);
    p.method = SW_CENTROID_METHOD_WCOG;
    expect_refused(&p, SW_EINVAL, "FWHM");
    p.fwhm_px = -1;
    expect_refused(&p, SW_EINVAL, "fwhm_px");
    p.fwhm_px = NAN;
    expect_refused(&p, SW_EINVAL, "fwhm_px");
    p.fwhm_px = 3;
    p.wcog_iterations = -1;
    expect_refused(&p, SW_EINVAL, "wcog_iterations");
    grid_params(&p, PITCH, NL, SW_PIX_F32, 1);
    p.method = SW_CENTROID_METHOD_BRIGHTEST;
    expect_refused(&p, SW_EINVAL, "brightest_n");
    p.method = SW_CENTROID_METHOD_CORRELATION;
    expect_refused(&p, SW_EINVAL, "reference");
    p.corr_reference = ref;
    p.corr_search_px = 8; /* 16 px regions: 2 * 8 + 1 > 16 */
    expect_refused(&p, SW_EINVAL, "inner area");
    p.corr_search_px = 3;
    ref[17] = NAN;
    expect_refused(&p, SW_ERANGE, "correlation reference");
    ref[17] = 0;
    p.method = SW_CENTROID_METHOD_QUADCELL;
    expect_refused(&p, SW_EINVAL, "quadcell");
    p.method = (sw_centroid_method)9;
    expect_refused(&p, SW_EINVAL, "unknown method");
    grid_params(&p, PITCH, NL, SW_PIX_F32, 1);
    p.read_noise_e = 3;
    expect_refused(&p, SW_EINVAL, "gain");
    p.read_noise_e = 0;
    p.edge_fraction = 2;
    expect_refused(&p, SW_EINVAL, "edge_fraction");
    p.edge_fraction = 0;
    p.min_snr = NAN;
    expect_refused(&p, SW_EINVAL, "min_snr");
    p.min_snr = 0;
    p.gain_e_per_adu = -1;
    expect_refused(&p, SW_EINVAL, "gain_e_per_adu");
    /* names */
    sw_centroid_method m;
    assert_int_equal(sw_centroid_method_parse("wcog", &m), SW_OK);
    assert_int_equal(m, SW_CENTROID_METHOD_WCOG);
    assert_int_equal(sw_centroid_method_parse("nope", &m), SW_EINVAL);
    assert_string_equal(sw_centroid_method_string(SW_CENTROID_METHOD_CORRELATION), "correlation");
    assert_string_equal(sw_centroid_status_string(SW_CENTROID_CUT), "cut");
    assert_string_equal(sw_centroid_status_string(99), "?");
    free(ref);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_monte_carlo),
        cmocka_unit_test(test_wcog_response),
        cmocka_unit_test(test_local_sky),
        cmocka_unit_test(test_brightest_select),
        cmocka_unit_test(test_correlation_shift),
        cmocka_unit_test(test_quadcell),
        cmocka_unit_test(test_status),
        cmocka_unit_test(test_generic_equals_fast),
        cmocka_unit_test(test_bad_params),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

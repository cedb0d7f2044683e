/*
 * Synthetic eyes (sim_eye.h, src/sim/eye.c; seed 001 Sec. 4.1, 4.3): the Thibos 2002 population
 * files, multivariate-normal draws (sample mean and covariance against the file's), refraction in
 * power-vector form, pupil rescaling, RMS scaling, binocular images (glow inside the pupils only,
 * the truth where the eyes were put, spot shifts for a known defocus), pupils cut by the image
 * edge, artefacts where they belong, reproducibility, and bad input.
 */
#include "testutil.h"

#include "spotwave/rng.h"
#include "spotwave/sim_eye.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PI 3.14159265358979323846

static sw_context *cpu(void)
{
    return sw_test_cpu_context(2);
}

static sw_ocular_population load(sw_context *ctx, double pupil_mm)
{
    sw_ocular_population p;
    sw_status st = sw_ocular_population_load(ctx, NULL, pupil_mm, &p);
    if (st != SW_OK)
        fail_msg("loading the %g mm population: %s", pupil_mm, sw_context_error(ctx));
    return p;
}

/* ------------------------------------------------------------------ population */

static void test_population_loads(void **state)
{
    (void)state;
    sw_context *ctx = cpu();
    const int counts[4] = {15, 28, 36, 66};
    for (int k = 0; k < 4; k++) {
        sw_ocular_population p = load(ctx, sw_ocular_pupils_mm[k]);
        assert_int_equal(p.count, counts[k]);
        assert_near(p.pupil_mm, sw_ocular_pupils_mm[k], 0);
        const size_t n = (size_t)p.count;
        /* L L^T reproduces the covariance, L is lower triangular, sd = sqrt(diag). */
        for (size_t i = 0; i < n; i++) {
            assert_near(sqrt(p.cov_um2[i * n + i]), p.sd_um[i], 1e-5 + 1e-3 * p.sd_um[i]);
            for (size_t j = 0; j < n; j++) {
                if (j > i)
                    assert_true(p.chol[i * n + j] == 0.0);
                double s = 0;
                for (size_t k2 = 0; k2 < n; k2++)
                    s += p.chol[i * n + k2] * p.chol[j * n + k2];
                assert_near(s, p.cov_um2[i * n + j], 1e-12 * p.cov_um2[0]);
            }
        }
        sw_ocular_population_free(&p);
        assert_null(p.mean_um);
    }
    /* Values straight from the 6.0 mm files. */
    sw_ocular_population p = load(ctx, 6.0);
    assert_near(p.mean_um[0], -0.143322, 1e-12);
    assert_near(p.sd_um[3], 0.203856, 1e-12);
    assert_near(p.cov_um2[1 * 36 + 0], -2.69502758e-01, 1e-15);
    sw_ocular_population_free(&p);
    sw_context_destroy(ctx);
}

static void test_draw_statistics(void **state)
{
    (void)state;
    sw_context *ctx = cpu();
    sw_ocular_population p = load(ctx, 6.0);
    const int N = 2000, n = p.count;
    sw_ocular_options opt;
    sw_ocular_options_default(&opt);
    opt.keep_tilt = 1;
    double *c = malloc((size_t)N * (size_t)n * sizeof(double));
    assert_non_null(c);
    for (int i = 0; i < N; i++)
        assert_int_equal(sw_ocular_draw(ctx, &p, 42, (uint64_t)i, &opt, c + (size_t)i * n, n),
                         SW_OK);
    double worst_mean = 0, worst_cov = 0;
    for (int j = 1; j < n; j++) { /* piston is set to 0 */
        double m = 0;
        for (int i = 0; i < N; i++)
            m += c[(size_t)i * n + j];
        m /= N;
        const double z = fabs(m - p.mean_um[j]) / (p.sd_um[j] / sqrt((double)N));
        worst_mean = z > worst_mean ? z : worst_mean;
    }
    for (int j = 1; j < n; j++)
        for (int k = 1; k <= j; k++) {
            double s = 0, mj = 0, mk = 0;
            for (int i = 0; i < N; i++) {
                mj += c[(size_t)i * n + j];
                mk += c[(size_t)i * n + k];
            }
            mj /= N;
            mk /= N;
            for (int i = 0; i < N; i++)
                s += (c[(size_t)i * n + j] - mj) * (c[(size_t)i * n + k] - mk);
            s /= N - 1;
            const double cjk = p.cov_um2[j * n + k];
            const double se =
                sqrt((p.cov_um2[j * n + j] * p.cov_um2[k * n + k] + cjk * cjk) / (double)N);
            const double z = fabs(s - cjk) / se;
            worst_cov = z > worst_cov ? z : worst_cov;
        }
    /* 35 means and 630 covariances: the largest deviation of a correct sampler stays below ~4
     * standard errors; swapping L for L^T or dropping the mean fails by far. */
    if (worst_mean > 4.5 || worst_cov > 5.0)
        fail_msg("sample statistics off: worst mean %.2f, worst covariance %.2f standard errors",
                 worst_mean, worst_cov);
    /* Eyes i and i + 1 are independent: no sizeable correlation between any of their terms
     * (sd of a sample correlation 1 / sqrt(N) = 0.022; draws that shared random numbers
     * between neighbouring indices would correlate strongly). */
    double worst_corr = 0;
    for (int j = 1; j < n; j++)
        for (int k = 1; k < n; k++) {
            double sj = 0, sk = 0, sjj = 0, skk = 0, sjk = 0;
            for (int i = 0; i + 1 < N; i++) {
                const double a = c[(size_t)i * n + j], b = c[(size_t)(i + 1) * n + k];
                sj += a, sk += b, sjj += a * a, skk += b * b, sjk += a * b;
            }
            const double m = N - 1;
            const double r = (sjk / m - sj * sk / (m * m)) /
                             sqrt((sjj / m - sj * sj / (m * m)) * (skk / m - sk * sk / (m * m)));
            worst_corr = fabs(r) > worst_corr ? fabs(r) : worst_corr;
        }
    if (worst_corr > 0.12)
        fail_msg("neighbouring eyes correlate: |r| up to %.3f", worst_corr);
    /* Same (seed, index): same eye; another index or seed: another eye. */
    double a[36], b[36];
    assert_int_equal(sw_ocular_draw(ctx, &p, 42, 7, &opt, a, n), SW_OK);
    assert_memory_equal(a, c + 7 * n, sizeof a);
    assert_int_equal(sw_ocular_draw(ctx, &p, 43, 7, &opt, b, n), SW_OK);
    assert_true(a[4] != b[4]);
    /* Default options zero the tilts and the piston. */
    assert_int_equal(sw_ocular_draw(ctx, &p, 42, 7, NULL, b, n), SW_OK);
    assert_true(b[0] == 0.0 && b[1] == 0.0 && b[2] == 0.0);
    assert_true(b[4] == a[4]);
    free(c);
    sw_ocular_population_free(&p);
    sw_context_destroy(ctx);
}

static void test_refraction(void **state)
{
    (void)state;
    /* -2 D sphere over 6 mm: M = -2, c(2,0) = 2 * 9 / (4 sqrt 3) = 2.598076 um. */
    sw_eye_rx rx = {-2.0, 0.0, 0.0};
    double z[3];
    sw_eye_rx_to_zernike(&rx, 6.0, z);
    assert_near(z[1], 18.0 / (4.0 * sqrt(3.0)), 1e-12);
    assert_near(z[1], 2.598076, 1e-6);
    assert_near(z[0], 0.0, 1e-15);
    assert_near(z[2], 0.0, 1e-15);
    /* plano -1 x 0 over 6 mm: M = -0.5, J0 = 0.5: c(2,0) = +0.6495, c(2,2) = -0.9186 um. */
    sw_eye_rx cyl = {0.0, -1.0, 0.0};
    sw_eye_rx_to_zernike(&cyl, 6.0, z);
    assert_near(z[1], 0.5 * 9.0 / (4.0 * sqrt(3.0)), 1e-12);
    assert_near(z[2], -0.5 * 9.0 / (2.0 * sqrt(6.0)), 1e-12);
    assert_near(z[0], 0.0, 1e-12);
    /* Axis 45: J45 = 0.5, J0 = 0: the oblique term. */
    cyl.axis_deg = 45.0;
    sw_eye_rx_to_zernike(&cyl, 6.0, z);
    assert_near(z[0], -0.5 * 9.0 / (2.0 * sqrt(6.0)), 1e-12);
    assert_near(z[2], 0.0, 1e-12);
    /* Through sw_ocular_apply: added to j = 3..5 over the result's pupil (here rescaled from
     * 6 mm to 4 mm first, so c(2,0) = 2 * 4 / (4 sqrt 3)). */
    sw_context *ctx = cpu();
    double in[15] = {0}, out[15];
    in[7] = 0.1; /* coma */
    sw_ocular_options o;
    sw_ocular_options_default(&o);
    o.rx = rx;
    o.pupil_mm = 4.0;
    assert_int_equal(sw_ocular_apply(ctx, in, 15, 6.0, &o, out, 15), SW_OK);
    assert_near(out[4], 2.0 * 4.0 / (4.0 * sqrt(3.0)), 1e-10);
    /* Coma over a smaller pupil: c(3,1) scales by s^3, and a tilt appears (zeroed here). */
    const double s = 4.0 / 6.0;
    assert_near(out[7], 0.1 * s * s * s, 1e-12);
    assert_near(out[1], 0.0, 0);
    o.keep_tilt = 1;
    assert_int_equal(sw_ocular_apply(ctx, in, 15, 6.0, &o, out, 15), SW_OK);
    assert_true(fabs(out[1]) > 1e-3);
    /* A refraction needs the second order. */
    assert_int_equal(sw_ocular_apply(ctx, in, 15, 6.0, &o, out, 4), SW_EINVAL);
    o.max_order = 1;
    assert_int_equal(sw_ocular_apply(ctx, in, 15, 6.0, &o, out, 15), SW_EINVAL);
    sw_context_destroy(ctx);
}

static double wavefront(const double *c, int count, double x, double y)
{
    double w = 0;
    for (int j = 0; j < count; j++) {
        int n, m;
        assert_int_equal(sw_zernike_osa_nm(j, &n, &m), SW_OK);
        w += c[j] * sw_zernike_eval(n, m, x, y);
    }
    return w;
}

static void test_rescale(void **state)
{
    (void)state;
    sw_context *ctx = cpu();
    /* Defocus: c(2,0) s^2 (and a piston). */
    double d[6] = {0, 0, 0, 0, 1.0, 0}, o[6];
    assert_int_equal(sw_ocular_rescale(ctx, d, 6, 6.0, 5.12, o), SW_OK);
    const double s = 5.12 / 6.0;
    assert_near(o[4], s * s, 1e-12);
    assert_near(o[3], 0, 1e-12);
    assert_near(o[1], 0, 1e-12);
    /* Random coefficients to order 10: the same wavefront at every point of the small disc. */
    double c[66], r[66];
    for (int j = 0; j < 66; j++) {
        sw_rng4 q = sw_rng_draw(3, SW_RNG_STREAM_TEST, (uint64_t)j);
        c[j] = sw_rng_u01(q.v[0], q.v[1]) - 0.5;
    }
    assert_int_equal(sw_ocular_rescale(ctx, c, 66, 7.5, 3.0, r), SW_OK);
    const double t = 3.0 / 7.5;
    for (int i = 0; i < 50; i++) {
        sw_rng4 q = sw_rng_draw(4, SW_RNG_STREAM_TEST, (uint64_t)i);
        const double rho = sqrt(sw_rng_u01(q.v[0], q.v[1])), th = 2 * PI * sw_rng_u01f(q.v[2]);
        const double x = rho * cos(th), y = rho * sin(th);
        assert_near(wavefront(r, 66, x, y), wavefront(c, 66, t * x, t * y), 1e-10);
    }
    /* In place; and no extrapolation to a larger pupil. */
    memcpy(r, c, sizeof c);
    assert_int_equal(sw_ocular_rescale(ctx, r, 66, 7.5, 3.0, r), SW_OK);
    assert_near(wavefront(r, 66, 0.3, -0.2), wavefront(c, 66, 0.3 * t, -0.2 * t), 1e-10);
    assert_int_equal(sw_ocular_rescale(ctx, c, 66, 6.0, 7.5, r), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(ctx), "no larger"));
    sw_context_destroy(ctx);
}

static void test_rms_and_order(void **state)
{
    (void)state;
    sw_context *ctx = cpu();
    sw_ocular_population p = load(ctx, 6.0);
    double raw[36], c[36];
    sw_ocular_options o;
    sw_ocular_options_default(&o);
    o.pupil_mm = 5.12;
    assert_int_equal(sw_ocular_draw(ctx, &p, 9, 3, &o, raw, 36), SW_OK);
    o.total_rms_um = 2.5;
    assert_int_equal(sw_ocular_draw(ctx, &p, 9, 3, &o, c, 36), SW_OK);
    double ss = 0;
    for (int j = 3; j < 36; j++)
        ss += c[j] * c[j];
    assert_near(sqrt(ss), 2.5, 1e-12);
    assert_near(sw_zernike_rms(c, 36, 3), 2.5, 1e-12);
    /* One factor for all terms: the shape is kept. */
    const double f = c[4] / raw[4];
    for (int j = 3; j < 36; j++)
        assert_near(c[j], f * raw[j], 1e-12);
    assert_true(c[0] == 0 && c[1] == 0 && c[2] == 0);
    /* Orders above max_order are 0; RMS still exact over what is left. */
    o.max_order = 4;
    assert_int_equal(sw_ocular_draw(ctx, &p, 9, 3, &o, c, 36), SW_OK);
    for (int j = 15; j < 36; j++)
        assert_true(c[j] == 0.0);
    assert_near(sw_zernike_rms(c, 36, 3), 2.5, 1e-12);
    /* Fewer output terms: the first count are written, the RMS is over them. */
    o.max_order = -1;
    assert_int_equal(sw_ocular_draw(ctx, &p, 9, 3, &o, c, 10), SW_OK);
    assert_near(sw_zernike_rms(c, 10, 3), 2.5, 1e-12);
    /* Nothing to scale. */
    o.max_order = 1;
    assert_int_equal(sw_ocular_draw(ctx, &p, 9, 3, &o, c, 36), SW_EINVAL);
    sw_ocular_population_free(&p);
    sw_context_destroy(ctx);
}

/* Copies the 3.0 mm files into a fresh folder, with the covariance replaced by cov_text (NULL:
 * as is) and the stats by stats_text (NULL: as is). Returns the folder. */
static const char *make_dir(const char *name, const char *stats_text, const char *cov_text)
{
    const char *dir = sw_test_path(name);
    static char saved[4][512];
    static int turn;
    char *keep = saved[turn++ % 4];
    snprintf(keep, 512, "%s", dir);
    assert_int_equal(mkdir(keep, 0700), 0);
    char def[4096], src[4300], dst[4300];
    sw_context *ctx = cpu();
    assert_int_equal(sw_ocular_default_dir(ctx, def, sizeof def), SW_OK);
    sw_context_destroy(ctx);
    const char *kinds[2] = {"stats", "cov"};
    const char *texts[2] = {stats_text, cov_text};
    for (int k = 0; k < 2; k++) {
        snprintf(dst, sizeof dst, "%s/thibos2002_pupil3.0mm_%s.csv", keep, kinds[k]);
        if (texts[k]) {
            sw_test_write_file(dst, texts[k], strlen(texts[k]));
        } else {
            snprintf(src, sizeof src, "%s/thibos2002_pupil3.0mm_%s.csv", def, kinds[k]);
            size_t size;
            void *data = sw_test_read_all(src, &size);
            sw_test_write_file(dst, data, size);
            free(data);
        }
    }
    return keep;
}

/* The 3.0 mm covariance file with entry (i, j) (and (j, i) when sym) set to v. */
static char *cov_with(int i, int j, double v, int sym)
{
    sw_context *ctx = cpu();
    sw_ocular_population p = load(ctx, 3.0);
    sw_context_destroy(ctx);
    const int n = p.count;
    p.cov_um2[i * n + j] = v;
    if (sym)
        p.cov_um2[j * n + i] = v;
    char *text = malloc(64 * 1024);
    size_t off = (size_t)sprintf(text, "# test covariance\n");
    for (int r = 0; r < n; r++)
        for (int c = 0; c < n; c++)
            off += (size_t)sprintf(text + off, "%.17g%s", p.cov_um2[r * n + c],
                                   c + 1 < n ? "," : "\n");
    sw_ocular_population_free(&p);
    return text;
}

static void test_population_errors(void **state)
{
    (void)state;
    sw_context *ctx = cpu();
    sw_ocular_population p;
    /* A pupil without statistics. */
    assert_int_equal(sw_ocular_population_load(ctx, NULL, 5.12, &p), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(ctx), "5.12 mm"));
    assert_non_null(strstr(sw_context_error(ctx), "7.5"));
    /* A folder without the files. */
    assert_int_equal(sw_ocular_population_load(ctx, sw_test_tmpdir(), 6.0, &p), SW_EIO);
    assert_non_null(strstr(sw_context_error(ctx), "thibos2002_pupil6.0mm_stats.csv"));
    assert_null(p.mean_um);
    /* The copies load. */
    const char *ok = make_dir("ok", NULL, NULL);
    assert_int_equal(sw_ocular_population_load(ctx, ok, 3.0, &p), SW_OK);
    sw_ocular_population_free(&p);
    /* Symmetric but not positive definite: a correlation above 1 between terms 3 and 4. */
    sw_ocular_population ref = load(ctx, 3.0);
    const double big = 3.0 * sqrt(ref.cov_um2[3 * 15 + 3] * ref.cov_um2[4 * 15 + 4]);
    sw_ocular_population_free(&ref);
    char *t = cov_with(3, 4, big, 1);
    const char *npd = make_dir("npd", NULL, t);
    free(t);
    assert_int_equal(sw_ocular_population_load(ctx, npd, 3.0, &p), SW_EFORMAT);
    assert_non_null(strstr(sw_context_error(ctx), "not positive definite"));
    assert_null(p.chol);
    /* Not symmetric. */
    t = cov_with(2, 5, 1e-3, 0);
    const char *asym = make_dir("asym", NULL, t);
    free(t);
    assert_int_equal(sw_ocular_population_load(ctx, asym, 3.0, &p), SW_EFORMAT);
    assert_non_null(strstr(sw_context_error(ctx), "not symmetric"));
    /* A variance that disagrees with the stats file's sd. */
    t = cov_with(6, 6, 1.0, 1);
    const char *var = make_dir("var", NULL, t);
    free(t);
    assert_int_equal(sw_ocular_population_load(ctx, var, 3.0, &p), SW_EFORMAT);
    assert_non_null(strstr(sw_context_error(ctx), "gives sd"));
    /* A short covariance file, and a stats file whose (n, m) disagree with j. */
    const char *shortc = make_dir("short", NULL, "# x\n1,2,3\n");
    assert_int_equal(sw_ocular_population_load(ctx, shortc, 3.0, &p), SW_EFORMAT);
    assert_non_null(strstr(sw_context_error(ctx), "values where 15 were expected"));
    const char *badnm =
        make_dir("badnm", "j,n,m,mean_um,sd_um\n0,0,0,0.1,0.2\n1,1,1,0,0.1\n", NULL);
    assert_int_equal(sw_ocular_population_load(ctx, badnm, 3.0, &p), SW_EFORMAT);
    assert_non_null(strstr(sw_context_error(ctx), "is not OSA index j = 1"));
    sw_context_destroy(ctx);
}

/* ------------------------------------------------------------------ eye images */

/* A binocular 1280 x 640 setup: 40 x 20 lenslets of 32 px, eyes at (320, 320) and (960, 320)
 * with 512-pixel pupils. No artefacts. */
static void binocular(sw_eyesim_params *p)
{
    sw_eyesim_params_default(p);
    p->sh.width = 1280;
    p->sh.height = 640;
    p->sh.geom.nx = 40;
    p->sh.geom.ny = 20;
    p->n_eyes = 2;
    p->eyes[0].cx_px = 320;
    p->eyes[0].cy_px = 320;
    p->eyes[0].diameter_px = 512;
    p->eyes[1] = p->eyes[0];
    p->eyes[1].cx_px = 960;
    sw_eye_artefacts_none(&p->art);
}

static sw_image render(sw_context *ctx, const sw_eyesim_params *p, sw_eyesim_truth *truth)
{
    sw_image img;
    assert_int_equal(sw_image_alloc(ctx, p->sh.width, p->sh.height, SW_PIX_F32, &img), SW_OK);
    sw_status st = sw_eyesim_render(ctx, p, &img, truth);
    if (st != SW_OK)
        fail_msg("sw_eyesim_render: %s", sw_context_error(ctx));
    return img;
}

static double px(const sw_image *img, int x, int y)
{
    return sw_image_get(img, x, y);
}

static int lit_count(const sw_sh_truth *t)
{
    int n = 0;
    for (int i = 0; i < t->nx * t->ny; i++)
        n += t->illum[i] > 0.0;
    return n;
}

/* Lenslets of the geometry whose square comes closer than r px to (cx, cy) (the distance from a
 * point to the square [x0 - 0.5 + d ix, x0 - 0.5 + d (ix + 1)) x ...). */
static int squares_within(const sw_sh_geometry *g, double cx, double cy, double r)
{
    int n = 0;
    for (int iy = 0; iy < g->ny; iy++)
        for (int ix = 0; ix < g->nx; ix++) {
            const double xa = g->x0 - 0.5 + g->pitch_px * ix, xb = xa + g->pitch_px;
            const double ya = g->y0 - 0.5 + g->pitch_px * iy, yb = ya + g->pitch_px;
            const double dx = cx < xa ? xa - cx : (cx > xb ? cx - xb : 0.0);
            const double dy = cy < ya ? ya - cy : (cy > yb ? cy - yb : 0.0);
            n += hypot(dx, dy) < r;
        }
    return n;
}

static void test_binocular_glow_and_truth(void **state)
{
    (void)state;
    sw_context *ctx = cpu();
    sw_eyesim_params p;
    binocular(&p);
    p.art.glow_e = 20.0;
    p.art.glow_falloff = 0.3;
    sw_eyesim_truth t;
    sw_image img = render(ctx, &p, &t);
    assert_int_equal(t.n_eyes, 2);
    int inside = 0, low_inside = 0;
    for (int y = 0; y < 640; y += 3)
        for (int x = 0; x < 1280; x += 3) {
            const double v = px(&img, x, y);
            double best = 1e9;
            for (int e = 0; e < 2; e++) {
                const double r = hypot(x - p.eyes[e].cx_px, y - p.eyes[e].cy_px) / 256.0;
                best = r < best ? r : best;
            }
            if (best < 0.9) {
                inside++;
                /* Glow 20 (1 - 0.3 rho^2) >= 15 e- under everything, spots on top. */
                low_inside += v < 15.0;
            } else if (best > 1.3) {
                if (v != 0.0)
                    fail_msg("pixel (%d, %d), %.2f pupil radii out, is %g, not 0", x, y, best, v);
            }
        }
    assert_true(inside > 10000);
    assert_int_equal(low_inside, 0);
    /* Truth: the ellipses as given, each eye's lenslets lit only under its own pupil. */
    for (int e = 0; e < 2; e++) {
        assert_near(t.eye[e].cx_px, p.eyes[e].cx_px, 0);
        assert_near(t.eye[e].cy_px, 320, 0);
        assert_near(t.eye[e].a_px, 256, 0);
        assert_near(t.eye[e].b_px, 256, 0);
        const sw_sh_truth *s = &t.eye[e].sh;
        assert_int_equal(s->nx, 40);
        int full = 0;
        for (int iy = 0; iy < 20; iy++)
            for (int ix = 0; ix < 40; ix++) {
                const int l = iy * 40 + ix;
                const double r =
                    hypot(s->ref_x_px[l] - p.eyes[e].cx_px, s->ref_y_px[l] - p.eyes[e].cy_px);
                if (r > 256 + 23)
                    assert_true(s->illum[l] == 0.0);
                if (r < 256 - 23) {
                    assert_near(s->illum[l], 1.0, 1e-9);
                    full++;
                }
            }
        /* The lenslets the pupil touches (a sliver of a pixel either way), most fully lit. */
        assert_true(full > 150);
        assert_in_range(lit_count(s), squares_within(&p.sh.geom, p.eyes[e].cx_px, 320, 255.5),
                        squares_within(&p.sh.geom, p.eyes[e].cx_px, 320, 256.5));
    }
    sw_eyesim_truth_free(&t);
    sw_image_free(&img);
    sw_context_destroy(ctx);
}

static void test_defocus_shift(void **state)
{
    (void)state;
    /* A pure defocus c(2,0) over the pupil: W = c sqrt3 (2 rho^2 - 1), so a lenslet at pupil
     * offset u (um at the lenslets) moves by -F 4 sqrt3 c u / R^2 pixels (OSA sign: the OPD is
     * -W), R = 250 px * 5.5 um. */
    sw_context *ctx = cpu();
    sw_eyesim_params p;
    sw_eyesim_params_default(&p);
    sw_eye_artefacts_none(&p.art);
    p.eyes[0].cx_px = 335.5; /* off the array's centre, to check the pupil's placement */
    p.eyes[0].cy_px = 300.5;
    p.eyes[0].diameter_px = 500;
    double c[6] = {0, 0, 0, 0, 1.5, 0};
    p.eyes[0].coef_um = c;
    p.eyes[0].count = 6;
    sw_eyesim_truth t;
    sw_image img = render(ctx, &p, &t);
    const sw_sh_truth *s = &t.eye[0].sh;
    const double R = 250 * 5.5, F = 3.5e3 / 5.5;
    int checked = 0;
    for (int l = 0; l < 400; l++) {
        if (!(s->illum[l] > 0.999))
            continue;
        const double u = (s->ref_x_px[l] - 335.5) * 5.5, v = (s->ref_y_px[l] - 300.5) * 5.5;
        /* OSA sign: a positive c(2,0) leads at the edge (converging): spots move inwards */
        assert_near(s->x_px[l] - s->ref_x_px[l], -F * 4 * sqrt(3.0) * 1.5 * u / (R * R), 1e-3);
        assert_near(s->y_px[l] - s->ref_y_px[l], -F * 4 * sqrt(3.0) * 1.5 * v / (R * R), 1e-3);
        checked++;
    }
    assert_true(checked > 150);
    assert_int_equal(t.eye[0].count, 6);
    assert_near(t.eye[0].coef_um[4], 1.5, 0);
    sw_eyesim_truth_free(&t);
    sw_image_free(&img);
    sw_context_destroy(ctx);
}

static void test_pupil_cut_by_edge(void **state)
{
    (void)state;
    sw_context *ctx = cpu();
    sw_eyesim_params p;
    sw_eyesim_params_default(&p);
    sw_eye_artefacts_none(&p.art);
    p.art.glow_e = 10.0;
    p.art.glow_falloff = 0.0;
    p.eyes[0].cx_px = 40;
    p.eyes[0].cy_px = 320;
    p.eyes[0].diameter_px = 400;
    sw_eyesim_truth t;
    sw_image img = render(ctx, &p, &t);
    /* The glow reaches the left edge and ends near x = 240. */
    assert_true(px(&img, 0, 320) >= 10.0);
    assert_true(px(&img, 200, 321) >= 10.0);
    for (int y = 0; y < 640; y += 7)
        assert_true(px(&img, 320, y) == 0.0);
    /* Lenslets lit: those of the array that the pupil touches, about 60% of a whole pupil's. */
    const int lit = lit_count(&t.eye[0].sh);
    assert_in_range(lit, squares_within(&p.sh.geom, 40, 320, 199.5),
                    squares_within(&p.sh.geom, 40, 320, 200.5));
    assert_in_range(lit, 80, 110);
    sw_eyesim_truth_free(&t);
    sw_image_free(&img);
    sw_context_destroy(ctx);
}

static void test_artefacts_where_they_belong(void **state)
{
    (void)state;
    sw_context *ctx = cpu();
    sw_eyesim_params p;
    binocular(&p);
    sw_image clean = render(ctx, &p, NULL);
    /* Reflections: a blob of the given peak near each pupil centre, nothing elsewhere. */
    p.art.reflection_e = 500.0;
    p.art.reflection_sigma_px = 10.0;
    p.art.reflection_offset = 0.3;
    sw_eyesim_truth t;
    sw_image refl = render(ctx, &p, &t);
    for (int e = 0; e < 2; e++) {
        const double rx = t.eye[e].reflection_x_px, ry = t.eye[e].reflection_y_px;
        assert_true(hypot(rx - p.eyes[e].cx_px, ry - p.eyes[e].cy_px) <= 0.3 * 256 + 1e-9);
        const int ix = (int)lround(rx), iy = (int)lround(ry);
        const double d = px(&refl, ix, iy) - px(&clean, ix, iy);
        assert_true(d > 500.0 * exp(-0.5 * 0.5) - 1e-3 && d <= 500.0 + 1e-3);
    }
    for (int y = 0; y < 640; y++)
        for (int x = 0; x < 1280; x++) {
            const double d = px(&refl, x, y) - px(&clean, x, y);
            double near = 1e9;
            for (int e = 0; e < 2; e++) {
                const double r = hypot(x - t.eye[e].reflection_x_px, y - t.eye[e].reflection_y_px);
                near = r < near ? r : near;
            }
            if (near > 10.0 * 13.0 && d != 0.0)
                fail_msg("the reflections changed pixel (%d, %d), %.0f px away, by %g", x, y, near,
                         d);
            assert_true(d >= 0.0);
        }
    sw_eyesim_truth_free(&t);
    /* Brightness map: a factor within 1 +- 0.3 of the clean image, not uniform. */
    p.art.reflection_e = 0.0;
    p.art.brightness = 0.3;
    sw_image bri = render(ctx, &p, NULL);
    double lo = 1e9, hi = -1e9;
    for (int y = 0; y < 640; y++)
        for (int x = 0; x < 1280; x++) {
            const double c = px(&clean, x, y);
            if (c > 50.0) {
                const double f = px(&bri, x, y) / c;
                lo = f < lo ? f : lo;
                hi = f > hi ? f : hi;
            } else if (c == 0.0) {
                assert_true(px(&bri, x, y) == 0.0);
            }
        }
    assert_true(lo >= 0.7 - 1e-5 && hi <= 1.3 + 1e-5);
    assert_true(hi - lo > 0.15);
    /* Tear film: darker around the blobs, never brighter than the clean image (blur aside, the
     * dip only removes light): the total drops. */
    p.art.brightness = 0.0;
    p.art.tear_blobs = 4;
    p.art.tear_depth = 0.8;
    p.art.tear_blur_px = 0.0;
    sw_image tear = render(ctx, &p, NULL);
    double s0 = 0, s1 = 0;
    for (int y = 0; y < 640; y++)
        for (int x = 0; x < 1280; x++) {
            s0 += px(&clean, x, y);
            s1 += px(&tear, x, y);
            assert_true(px(&tear, x, y) <= px(&clean, x, y) + 1e-3);
        }
    assert_true(s1 < 0.97 * s0);
    sw_image_free(&tear);
    sw_image_free(&bri);
    sw_image_free(&refl);
    sw_image_free(&clean);
    sw_context_destroy(ctx);
}

static void test_reproducible(void **state)
{
    (void)state;
    sw_context *ctx = cpu();
    sw_eyesim_params p;
    binocular(&p);
    sw_eye_artefacts_default(&p.art);
    p.art.tear_blobs = 3;
    p.seed = 77;
    sw_image a = render(ctx, &p, NULL);
    sw_image b = render(ctx, &p, NULL);
    assert_true(sw_image_equal(&a, &b));
    /* Any thread count: the same image. */
    sw_context *one = sw_test_cpu_context(1);
    sw_image c = render(one, &p, NULL);
    assert_true(sw_image_equal(&a, &c));
    p.seed = 78;
    sw_image d = render(ctx, &p, NULL);
    assert_false(sw_image_equal(&a, &d));
    sw_image_free(&a);
    sw_image_free(&b);
    sw_image_free(&c);
    sw_image_free(&d);
    sw_context_destroy(one);
    sw_context_destroy(ctx);
}

static void test_render_errors(void **state)
{
    (void)state;
    sw_context *ctx = cpu();
    sw_eyesim_params p;
    sw_eyesim_params_default(&p);
    sw_image img;
    assert_int_equal(sw_image_alloc(ctx, 640, 640, SW_PIX_F32, &img), SW_OK);
    sw_test_fill_random(&img, 5);
    sw_image copy;
    assert_int_equal(sw_image_alloc(ctx, 640, 640, SW_PIX_F32, &copy), SW_OK);
    assert_int_equal(sw_image_copy(ctx, &img, &copy), SW_OK);
    /* An eye entirely off the image. */
    p.eyes[0].cx_px = 1000;
    assert_int_equal(sw_eyesim_render(ctx, &p, &img, NULL), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(ctx), "outside the 640x640 image"));
    assert_true(sw_image_equal(&img, &copy));
    sw_eyesim_params_default(&p);
    p.n_eyes = 3;
    assert_int_equal(sw_eyesim_render(ctx, &p, &img, NULL), SW_EINVAL);
    sw_eyesim_params_default(&p);
    p.eyes[0].ellipticity = 0.0;
    assert_int_equal(sw_eyesim_render(ctx, &p, &img, NULL), SW_EINVAL);
    sw_eyesim_params_default(&p);
    double c[3] = {0, NAN, 0};
    p.eyes[0].coef_um = c;
    p.eyes[0].count = 3;
    assert_int_equal(sw_eyesim_render(ctx, &p, &img, NULL), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(ctx), "j = 1"));
    sw_eyesim_params_default(&p);
    p.art.brightness = 1.0;
    assert_int_equal(sw_eyesim_render(ctx, &p, &img, NULL), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(ctx), "brightness"));
    sw_eyesim_params_default(&p);
    p.sh.geom.nx = 21; /* the grid no longer fits the image: the SH simulator says so */
    assert_int_equal(sw_eyesim_render(ctx, &p, &img, NULL), SW_EINVAL);
    assert_true(sw_image_equal(&img, &copy));
    /* Wrong output image. */
    sw_eyesim_params_default(&p);
    sw_image u8;
    assert_int_equal(sw_image_alloc(ctx, 640, 640, SW_PIX_U8, &u8), SW_OK);
    assert_int_equal(sw_eyesim_render(ctx, &p, &u8, NULL), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(ctx), "host f32"));
    sw_image_free(&u8);
    sw_image_free(&copy);
    sw_image_free(&img);
    sw_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_population_loads),
        cmocka_unit_test(test_draw_statistics),
        cmocka_unit_test(test_refraction),
        cmocka_unit_test(test_rescale),
        cmocka_unit_test(test_rms_and_order),
        cmocka_unit_test(test_population_errors),
        cmocka_unit_test(test_binocular_glow_and_truth),
        cmocka_unit_test(test_defocus_shift),
        cmocka_unit_test(test_pupil_cut_by_edge),
        cmocka_unit_test(test_artefacts_where_they_belong),
        cmocka_unit_test(test_reproducible),
        cmocka_unit_test(test_render_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

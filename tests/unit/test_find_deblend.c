/*
 * Tests of deblending (find.h "Deblending") on the CPU:
 *   - two Gaussian stars (sigma 1.5 px, Poisson noise over a sky) at separations 2.5 to 4 sigma
 *     with flux ratios 1:1 and 1:5 come out as two spots sharing a parent id, each centroid near
 *     its star; a 1:5 pair closer than 3.2 sigma has no second maximum (no saddle) and stays one
 *     spot, as multi-thresholding must leave it;
 *   - refinement of the children (refine.h "Blends"): a one-star GAUSS fit of each child alone
 *     is pulled onto its neighbour; through find with --refine gauss or moffat the children of a
 *     blend are fitted jointly and come out closer to their stars than the deblended centroids,
 *     with honest variances; XWIN keeps the deblended centroids;
 *   - one star is not split by its noise: Monte Carlo over seeds and sub-pixel phases at SNR 50,
 *     at least 99 % of the stars stay one spot;
 *   - the contrast threshold: a faint star beside a bright one is split off only while its
 *     share of the blend's flux is above deblend_contrast; contrast 1 never splits;
 *   - without deblending nothing changes (same spots, parent 0); a sequence deblends as a
 *     single frame does; the stats count blends and children;
 *   - bad parameters (levels, contrast, the switch) and 3-D sequences are refused.
 */
#include "find_testutil.h"
#include "testutil.h"

#include "spotwave/find.h"
#include "spotwave/refine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#define SIGMA 1.5
#define SKY   20.0 /* e- (photon counting: gain 1) */

/* The fraction of a Gaussian (centre c, width s) on pixel i: [i - 1/2, i + 1/2). */
static double pix_frac(int i, double c, double s)
{
    return 0.5 * (erf((i + 0.5 - c) / (sqrt(2.0) * s)) - erf((i - 0.5 - c) / (sqrt(2.0) * s)));
}

/* A u16 frame of n stars (x, y, flux e-) over the sky with Poisson noise (seed). */
static sw_image pair_scene(int w, int h, int n, const double *x, const double *y,
                           const double *flux, uint64_t seed)
{
    sw_image img;
    if (sw_image_alloc(cpu, w, h, SW_PIX_U16, &img) != SW_OK)
        fail_msg("sw_image_alloc: %s", sw_context_error(cpu));
    trng r = trng_make(seed);
    for (int py = 0; py < h; py++) {
        uint16_t *row = sw_image_row(&img, py);
        for (int px = 0; px < w; px++) {
            double e = SKY;
            for (int k = 0; k < n; k++)
                if (fabs(px - x[k]) < 12 && fabs(py - y[k]) < 12)
                    e += flux[k] * pix_frac(px, x[k], SIGMA) * pix_frac(py, y[k], SIGMA);
            row[px] = (uint16_t)poisson(&r, e);
        }
    }
    return img;
}

static sw_find_plan *plan_for(int w, int h, int deblend, int levels, double contrast)
{
    sw_find_params p;
    sw_find_params_default(&p, w, h, SW_PIX_U16);
    p.deblend = deblend;
    p.deblend_levels = levels;
    p.deblend_contrast = contrast;
    p.max_separation = 0.0; /* a blend's centroid lies between its stars */
    sw_find_plan *plan = NULL;
    if (sw_find_create(cpu, &p, &plan) != SW_OK)
        fail_msg("sw_find_create: %s", sw_context_error(cpu));
    return plan;
}

/* Spots of one frame. */
static sw_spot_list run(sw_find_plan *plan, const sw_image *img, sw_find_stats *stats)
{
    sw_spot_list l = {0};
    if (sw_find_run(plan, img, 0, &l, NULL, stats) != SW_OK)
        fail_msg("sw_find_run: %s", sw_context_error(cpu));
    return l;
}

/* The spot nearest (x, y) and its distance. */
static int64_t nearest(const sw_spot_list *l, double x, double y, double *dist)
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

/* ---------------------------------------------------------------- pairs */

/* What the runs of one pair configuration give (errors: mean distance of a child from its
 * star, px). */
typedef struct pair_result {
    int split;
    double err_c;    /* the deblended centroids                                   */
    double err_lone; /* a GAUSS fit of each child alone (parent cleared)           */
    double err_g;    /* through find with --refine gauss: the children's joint fit */
    double err_m;    /* the same with --refine moffat (Gaussian stars)             */
    double pull2;    /* GAUSS joint: mean of dx^2 / x_var over the children's axes  */
} pair_result;

/* Refines the list l of one frame through find with refinement `ref` attached: returns the mean
 * error of the children against (x, y), checks the joint-fit flags, and adds dx^2 / var. */
static double joint_error(sw_find_plan *plan, sw_refine_plan *ref, const sw_image *img,
                          const double *x, const double *y, double *pull, int *npull)
{
    sw_refine_list rl = {0};
    assert_int_equal(sw_find_set_refine(plan, ref, &rl), SW_OK);
    sw_spot_list lr = run(plan, img, NULL);
    assert_int_equal(sw_find_set_refine(plan, NULL, NULL), SW_OK);
    assert_int_equal(lr.count, 2);
    assert_int_equal(rl.count, 2);
    double err = 0.0;
    for (int k = 0; k < 2; k++) {
        double d;
        const int64_t i = nearest(&lr, x[k], y[k], &d);
        assert_true(rl.items[i].flags & SW_REFINE_JOINT);
        assert_false(rl.items[i].flags & (SW_REFINE_BLEND | SW_REFINE_FAILED));
        assert_true(rl.items[i].x == lr.spots[i].x && rl.items[i].x_var == lr.spots[i].x_var);
        err += d;
        *pull += (lr.spots[i].x - x[k]) * (lr.spots[i].x - x[k]) / lr.spots[i].x_var +
                 (lr.spots[i].y - y[k]) * (lr.spots[i].y - y[k]) / lr.spots[i].y_var;
        *npull += 2;
    }
    sw_spot_list_free(&lr);
    sw_refine_list_free(&rl);
    return err;
}

/*
 * Splits of pairs (separation sep sigma, flux ratio 1:ratio, the brighter 40000 e-) over 4
 * seeds (orientations): how many split, and the children's errors deblended, after a lone
 * GAUSS fit and after the joint GAUSS and MOFFAT fits (annulus background).
 */
static pair_result pair_runs(int levels, double sep, double ratio)
{
    const int W = 64;
    const double bright = 40000.0, d = sep * SIGMA; /* e-, px */
    sw_find_plan *plan = plan_for(W, W, 1, levels, 0.005);
    sw_refine_params rp;
    sw_refine_params_default(&rp, W, W, SW_PIX_U16);
    rp.background = SW_BACKGROUND_ANNULUS;
    sw_refine_plan *ref[3] = {NULL, NULL, NULL}; /* GAUSS, MOFFAT, XWIN */
    const sw_refine_method methods[3] = {SW_REFINE_GAUSS, SW_REFINE_MOFFAT, SW_REFINE_XWIN};
    for (int m = 0; m < 3; m++) {
        rp.method = methods[m];
        assert_int_equal(sw_refine_create(cpu, &rp, &ref[m]), SW_OK);
    }
    pair_result out;
    memset(&out, 0, sizeof out);
    int npull = 0;
    for (int seed = 1; seed <= 4; seed++) {
        const double ang = 0.7 * seed;
        double x[2] = {31.3 - 0.5 * d * cos(ang), 31.3 + 0.5 * d * cos(ang)};
        double y[2] = {32.1 - 0.5 * d * sin(ang), 32.1 + 0.5 * d * sin(ang)};
        double f[2] = {bright, bright / ratio};
        sw_image img = pair_scene(W, W, 2, x, y, f, 100u * (uint64_t)seed + (uint64_t)(sep * 8));
        sw_find_stats st = {0};
        sw_spot_list l = run(plan, &img, &st);
        if (l.count == 2) {
            out.split++;
            assert_true(l.spots[0].parent == 1 && l.spots[1].parent == 1);
            assert_int_equal(st.blends, 1);
            assert_int_equal(st.children, 2);
            /* one child per star */
            double d0, d1;
            int64_t i0 = nearest(&l, x[0], y[0], &d0), i1 = nearest(&l, x[1], y[1], &d1);
            assert_true(i0 != i1);
            out.err_c += d0 + d1;
            /* the children fitted jointly, through find */
            out.err_g += joint_error(plan, ref[0], &img, x, y, &out.pull2, &npull);
            double unused = 0.0;
            int unused_n = 0;
            out.err_m += joint_error(plan, ref[1], &img, x, y, &unused, &unused_n);
            /* XWIN keeps the deblended centroids (SW_REFINE_BLEND) */
            sw_refine_list rl = {0};
            assert_int_equal(sw_find_set_refine(plan, ref[2], &rl), SW_OK);
            sw_spot_list lx = run(plan, &img, NULL);
            assert_int_equal(sw_find_set_refine(plan, NULL, NULL), SW_OK);
            assert_int_equal(lx.count, 2);
            for (int k = 0; k < 2; k++) {
                assert_true(lx.spots[k].x == l.spots[k].x && lx.spots[k].y == l.spots[k].y);
                assert_true(rl.items[k].flags & SW_REFINE_BLEND);
                assert_true(rl.items[k].x == l.spots[k].x);
            }
            sw_spot_list_free(&lx);
            sw_refine_list_free(&rl);
            /* each child alone (parent cleared): pulled onto its neighbour */
            for (int k = 0; k < 2; k++)
                l.spots[k].parent = 0;
            assert_int_equal(sw_refine_run(ref[0], &img, l.spots, l.count, NULL), SW_OK);
            nearest(&l, x[0], y[0], &d0);
            nearest(&l, x[1], y[1], &d1);
            out.err_lone += d0 + d1;
        } else {
            assert_int_equal(l.count, 1);
            assert_int_equal(l.spots[0].parent, 0);
            assert_int_equal(st.blends, 0);
        }
        sw_spot_list_free(&l);
        sw_image_free(&img);
    }
    if (out.split) {
        out.err_c /= 2 * out.split;
        out.err_lone /= 2 * out.split;
        out.err_g /= 2 * out.split;
        out.err_m /= 2 * out.split;
        out.pull2 /= npull;
    }
    print_message("%d levels, %.1f sigma apart, 1:%g: split %d/4, error (px) deblended %.3f, "
                  "lone GAUSS %.3f, joint GAUSS %.3f, joint MOFFAT %.3f; GAUSS pull^2 %.2f\n",
                  levels, sep, ratio, out.split, out.err_c, out.err_lone, out.err_g, out.err_m,
                  out.pull2);
    for (int m = 0; m < 3; m++)
        sw_refine_destroy(ref[m]);
    sw_find_destroy(plan);
    return out;
}

static void test_pairs_split(void **state)
{
    (void)state;
    pair_result r;
    /* equal stars 3 .. 4 sigma apart: split with the default 32 levels; the joint fits place
     * the children closer to their stars than the deblended centroids, a lone fit farther */
    for (int k = 0; k < 3; k++) {
        r = pair_runs(32, 3.0 + 0.5 * k, 1.0);
        assert_int_equal(r.split, 4);
        assert_true(r.err_c < 0.2);
        assert_true(r.err_g < r.err_c && r.err_m < r.err_c);
        assert_true(r.err_lone > r.err_c);
        assert_true(r.pull2 < 3.0); /* 16 squared pulls: honest variances (chi^2_16 / 16) */
    }
    /* 2.5 sigma: a saddle 11 % below the peaks, finer than 32 levels over this range resolve;
     * 64 levels split most */
    r = pair_runs(64, 2.5, 1.0);
    assert_true(r.split >= 3);
    assert_true(r.err_c < 0.5);
    /* 1:5 beyond 3.3 sigma: the faint star has a maximum of its own */
    r = pair_runs(32, 3.5, 5.0);
    assert_int_equal(r.split, 4);
    assert_true(r.err_c < 0.25);
    assert_true(r.err_g < r.err_c && r.err_m < r.err_c);
    assert_true(r.pull2 < 3.0);
    r = pair_runs(32, 4.0, 5.0);
    assert_int_equal(r.split, 4);
    assert_true(r.err_c < 0.15);
    assert_true(r.err_g < r.err_c && r.err_m < r.err_c);
    assert_true(r.pull2 < 3.0);
    /* 1:5 at 2.5 and 3 sigma: one maximum, nothing to split (multi-thresholding cannot) */
    assert_int_equal(pair_runs(32, 2.5, 5.0).split, 0);
    assert_int_equal(pair_runs(32, 3.0, 5.0).split, 0);
}

/* ---------------------------------------------------------------- single stars */

static void test_single_not_split(void **state)
{
    (void)state;
    /* SNR 50 over the sky's noise: flux F with F / sqrt(F + npix sky) = 50 */
    const int W = 200, G = 10, step = 20;
    const double npix = 4.0 * 3.14159265358979 * SIGMA * SIGMA; /* the PSF's noise area */
    const double snr = 50.0;
    const double F = 0.5 * (snr * snr + snr * sqrt(snr * snr + 4.0 * npix * SKY));
    sw_find_plan *plan = plan_for(W, W, 1, 32, 0.005);
    int64_t stars = 0, split = 0, lost = 0;
    for (int seed = 1; seed <= 6; seed++) {
        double x[G * G], y[G * G], f[G * G];
        for (int k = 0; k < G * G; k++) {
            x[k] = step / 2 + (k % G) * step + (k % G) / 10.0 + 0.03 * seed;
            y[k] = step / 2 + (k / G) * step + (k / G) / 10.0 + 0.05 * seed;
            f[k] = F;
        }
        sw_image img = pair_scene(W, W, G * G, x, y, f, 7000u + (uint64_t)seed);
        sw_spot_list l = run(plan, &img, NULL);
        for (int k = 0; k < G * G; k++) {
            int near = 0;
            for (int64_t i = 0; i < l.count; i++)
                if (hypot(l.spots[i].x - x[k], l.spots[i].y - y[k]) < 5.0)
                    near++;
            stars++;
            split += near > 1;
            lost += near == 0;
        }
        sw_spot_list_free(&l);
        sw_image_free(&img);
    }
    print_message("single stars at SNR %.0f (flux %.0f e-): %lld of %lld split, %lld lost\n", snr,
                  F, (long long)split, (long long)stars, (long long)lost);
    assert_int_equal(lost, 0);
    assert_true((double)split <= 0.01 * (double)stars);
    sw_find_destroy(plan);
}

/* ---------------------------------------------------------------- contrast */

/* A 1:20 pair 5 sigma apart: the faint star holds 1/21 (4.8 %) of the blend's flux. */
static int64_t contrast_count(double contrast, sw_find_stats *st)
{
    const int W = 64;
    double x[2] = {28.2, 28.2 + 5.0 * SIGMA}, y[2] = {31.6, 31.9}, f[2] = {40000.0, 2000.0};
    sw_image img = pair_scene(W, W, 2, x, y, f, 4242u);
    sw_find_plan *plan = plan_for(W, W, 1, 32, contrast);
    memset(st, 0, sizeof(*st));
    sw_spot_list l = run(plan, &img, st);
    const int64_t n = l.count;
    sw_spot_list_free(&l);
    sw_find_destroy(plan);
    sw_image_free(&img);
    return n;
}

static void test_contrast(void **state)
{
    (void)state;
    sw_find_stats st;
    assert_int_equal(contrast_count(0.005, &st), 2);
    assert_int_equal(st.blends, 1);
    assert_int_equal(contrast_count(0.02, &st), 2);
    /* above the faint star's whole share: its branch can never count */
    assert_int_equal(contrast_count(0.06, &st), 1);
    assert_int_equal(st.blends, 0);
    assert_int_equal(contrast_count(1.0, &st), 1);
    assert_int_equal(st.blends, 0);
}

/* ---------------------------------------------------------------- off, sequences, stats */

typedef struct seq_src {
    const sw_image *img;
} seq_src;

static sw_status seq_read(void *user, int64_t index, sw_image *dst)
{
    (void)index;
    return sw_image_copy(NULL, ((seq_src *)user)->img, dst);
}

static void test_off_and_sequence(void **state)
{
    (void)state;
    const int W = 96;
    /* an isolated star and an equal pair 4 sigma apart */
    double x[3] = {20.4, 60.2, 60.2 + 4.0 * SIGMA}, y[3] = {30.7, 60.3, 60.3};
    double f[3] = {30000.0, 30000.0, 30000.0};
    sw_image img = pair_scene(W, W, 3, x, y, f, 77u);
    sw_find_plan *off = plan_for(W, W, 0, 32, 0.005);
    sw_find_plan *on = plan_for(W, W, 1, 32, 0.005);
    sw_find_stats s_off = {0}, s_on = {0};
    sw_spot_list a = run(off, &img, &s_off), b = run(on, &img, &s_on);
    assert_int_equal(a.count, 2);
    assert_int_equal(b.count, 3);
    for (int64_t i = 0; i < a.count; i++)
        assert_int_equal(a.spots[i].parent, 0);
    assert_int_equal(s_off.blends, 0);
    assert_int_equal(s_on.blends, 1);
    assert_int_equal(s_on.children, 2);
    assert_int_equal(s_on.components, s_off.components);
    /* the isolated star is the same spot either way; the children share parent 2 (their first's
     * 1-based position) */
    assert_memory_equal(&a.spots[0], &b.spots[0], sizeof(sw_spot));
    assert_int_equal(b.spots[1].parent, 2);
    assert_int_equal(b.spots[2].parent, 2);
    /* the children's pixels are the blend's */
    assert_int_equal(b.spots[1].npix + b.spots[2].npix, a.spots[1].npix);
    assert_near(b.spots[1].intensity + b.spots[2].intensity, a.spots[1].intensity, 1e-6);
    /* a sequence of 3 frames: the same spots per frame; parents point into the whole list */
    seq_src src = {&img};
    sw_find_source fs = {seq_read, NULL, NULL, &src};
    sw_spot_list c = {0};
    sw_find_stats s_seq = {0};
    assert_int_equal(sw_find_sequence(on, 0, 3, &fs, 0, &c, &s_seq), SW_OK);
    assert_int_equal(c.count, 9);
    assert_int_equal(s_seq.blends, 3);
    for (int64_t k = 0; k < 3; k++) {
        for (int j = 0; j < 3; j++) {
            sw_spot e = b.spots[j], g = c.spots[3 * k + j];
            if (e.parent)
                e.parent += 3 * k;
            e.z = (double)k;
            e.z0 = k;
            e.z1 = k + 1;
            e.peak_z = k;
            assert_memory_equal(&e, &g, sizeof(sw_spot));
        }
    }
    /* 3-D joining is refused with deblending */
    sw_spot_list d = {0};
    assert_int_equal(sw_find_sequence(on, 0, 2, &fs, 1, &d, NULL), SW_EINVAL);
    assert_int_equal(d.count, 0);
    sw_spot_list_free(&a);
    sw_spot_list_free(&b);
    sw_spot_list_free(&c);
    sw_find_destroy(off);
    sw_find_destroy(on);
    sw_image_free(&img);
}

static void test_bad_params(void **state)
{
    (void)state;
    sw_find_params p;
    sw_find_plan *plan = NULL;
    const struct {
        int deblend, levels;
        double contrast;
    } bad[] = {
        {2, 32, 0.005}, {-1, 32, 0.005}, {1, 0, 0.005}, {1, SW_FIND_MAX_DEBLEND_LEVELS + 1, 0.005},
        {1, 32, -0.1},  {1, 32, 1.5},    {1, 32, NAN},  {0, 0, 0.005}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sw_find_params_default(&p, 32, 32, SW_PIX_U16);
        p.deblend = bad[i].deblend;
        p.deblend_levels = bad[i].levels;
        p.deblend_contrast = bad[i].contrast;
        assert_int_equal(sw_find_create(cpu, &p, &plan), SW_EINVAL);
        assert_null(plan);
    }
    sw_find_params_default(&p, 32, 32, SW_PIX_U16);
    assert_int_equal(p.deblend, 0);
    assert_int_equal(p.deblend_levels, 32);
    assert_near(p.deblend_contrast, 0.005, 0.0);
    p.deblend = 1;
    p.deblend_levels = 1; /* one level: nothing to split, but valid */
    p.deblend_contrast = 0.0;
    assert_int_equal(sw_find_create(cpu, &p, &plan), SW_OK);
    sw_find_destroy(plan);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pairs_split), cmocka_unit_test(test_single_not_split),
        cmocka_unit_test(test_contrast),    cmocka_unit_test(test_off_and_sequence),
        cmocka_unit_test(test_bad_params),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

/*
 * Wavefront maps (zernike_fit.h, seed 001 section 3.4) on the CPU: the IEEE half conversion,
 * the map's RMS over the pupil against orthonormality (converging with the pixel count), values
 * against sw_zernike_sum_grad at the pixel centres, half maps within their rounding bound of the
 * float maps, NaN outside the pupil and inside the obscuration, the modulo-1 display, the PNG,
 * the on-the-fly (direct) method, and bad input.
 */
#include "testutil.h"
#include "spotwave/rng.h"
#include "zernike/zmap_internal.h"

#include <math.h>
#include <png.h>
#include <stdlib.h>
#include <string.h>

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

/* Reproducible coefficients in [-1, 1) um scaled by 1 / (n + 1) (a falling spectrum, as eyes). */
static void random_coefs(double *c, int32_t count, uint64_t seed)
{
    for (int32_t j = 0; j < count; j++) {
        int n, m;
        assert_int_equal(sw_zernike_osa_nm(j, &n, &m), SW_OK);
        sw_rng4 r = sw_rng_draw(seed, SW_RNG_STREAM_USER, (uint64_t)j);
        c[j] = (2.0 * (double)r.v[0] / 4294967296.0 - 1.0) / (n + 1);
    }
}

/* Pixel centre of pixel i of a size-pixel map in unit-disc coordinates (zernike_fit.h). */
static double coord(int32_t i, int32_t size)
{
    return (2.0 * i + 1.0) / size - 1.0;
}

static sw_zmap_plan *make_plan(int32_t size, int order, double obsc, int half)
{
    sw_zmap_params p;
    sw_zmap_params_default(&p);
    p.size = size;
    p.max_order = order;
    p.obscuration = obsc;
    p.half = half;
    sw_zmap_plan *plan = NULL;
    sw_status st = sw_zmap_create(cpu, &p, &plan);
    if (st != SW_OK)
        fail_msg("sw_zmap_create: %s", sw_context_error(cpu));
    return plan;
}

static sw_image map_of(sw_zmap_plan *plan, int32_t size, const double *c, int32_t count)
{
    sw_image out;
    assert_int_equal(sw_image_alloc(cpu, size, size, SW_PIX_F32, &out), SW_OK);
    sw_status st = sw_zmap_run(plan, c, count, &out);
    if (st != SW_OK)
        fail_msg("sw_zmap_run: %s", sw_context_error(cpu));
    return out;
}

static float px(const sw_image *img, int32_t i, int32_t k)
{
    return ((const float *)sw_image_row(img, k))[i];
}

/* ------------------------------------------------------------------ IEEE half */

static int64_t half_ord(uint16_t h) /* a monotone integer order of the finite halves */
{
    return (h & 0x8000u) ? -(int64_t)(h & 0x7fffu) : (int64_t)h;
}

static void test_half_known_values(void **state)
{
    (void)state;
    /* IEEE 754 binary16 facts. */
    assert_int_equal(sw_half_from_float(1.0f), 0x3c00);
    assert_int_equal(sw_half_from_float(-2.0f), 0xc000);
    assert_int_equal(sw_half_from_float(0.0f), 0x0000);
    assert_int_equal(sw_half_from_float(-0.0f), 0x8000);
    assert_int_equal(sw_half_from_float(65504.0f), 0x7bff); /* largest finite */
    assert_int_equal(sw_half_from_float(65519.0f), 0x7bff); /* below the midpoint */
    assert_int_equal(sw_half_from_float(65520.0f), 0x7c00); /* midpoint: ties to even = Inf */
    assert_int_equal(sw_half_from_float(1e9f), 0x7c00);
    assert_int_equal(sw_half_from_float(-INFINITY), 0xfc00);
    assert_int_equal(sw_half_from_float(0x1p-14f), 0x0400);        /* smallest normal */
    assert_int_equal(sw_half_from_float(0x1p-24f), 0x0001);        /* smallest subnormal */
    assert_int_equal(sw_half_from_float(0x1p-25f), 0x0000);        /* tie between 0 and 2^-24 */
    assert_int_equal(sw_half_from_float(0x1.8p-25f), 0x0001);      /* above the tie */
    assert_int_equal(sw_half_from_float(0x3p-25f), 0x0002);        /* tie 1.5 ulp -> even 2 */
    assert_int_equal(sw_half_from_float(1.0f + 0x1p-11f), 0x3c00); /* tie -> even */
    assert_int_equal(sw_half_from_float(1.0f + 0x3p-11f), 0x3c02); /* tie -> even (up) */
    assert_int_equal(sw_half_from_float(1.0f + 0x1.8p-11f), 0x3c01);
    assert_int_equal(sw_half_from_float(0x1.ffcp-15f),
                     0x0400); /* subnormal rounding up to normal */
    assert_true(isnan(sw_half_to_float(sw_half_from_float(NAN))));
    assert_true(sw_half_to_float(0x7c00) == INFINITY);
    assert_true(sw_half_to_float(0x0001) == 0x1p-24f);
    assert_true(sw_half_to_float(0x3555) == 0x1.554p-2f);
}

/* Every half survives half -> float -> half; every float rounds to a nearest half, ties even. */
static void test_half_round_trip_and_rounding(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536u; h++) {
        const float f = sw_half_to_float((uint16_t)h);
        if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu))
            assert_true(isnan(f));
        else
            assert_int_equal(sw_half_from_float(f), h);
    }
    for (uint64_t t = 0; t < 400000; t++) {
        sw_rng4 r = sw_rng_draw(77, SW_RNG_STREAM_USER, t);
        /* float bit patterns over |x| < 2^17 (the whole half range, subnormals included) */
        uint32_t bits = r.v[0] % 0x48000000u | (r.v[1] & 0x80000000u);
        float x;
        memcpy(&x, &bits, sizeof x);
        const uint16_t h = sw_half_from_float(x);
        const double v = sw_half_to_float(h), d = fabs(v - (double)x);
        if (fabs(x) >= 65520.0) {
            assert_true(isinf(v));
            continue;
        }
        assert_true(isfinite(v));
        /* the neighbours of h among the finite halves */
        for (int s = -1; s <= 1; s += 2) {
            int64_t o = half_ord(h) + s;
            if (o > 0x7bff || o < -0x7bff)
                continue;
            uint16_t hn = o >= 0 ? (uint16_t)o : (uint16_t)(0x8000u | (uint16_t)(-o));
            const double dn = fabs((double)sw_half_to_float(hn) - (double)x);
            assert_true(d <= dn);
            if (d == dn && v != 0.0) /* a tie: h has the even significand */
                assert_int_equal(h & 1u, 0);
        }
    }
}

/* ------------------------------------------------------------------ the maps */

/* Orthonormality: the RMS (about the mean) of W over the pupil pixels is sqrt(sum_{j>=1} c_j^2),
 * to within the pixel discretisation of the disc, which shrinks as the pixels do. */
static void test_rms_orthonormality(void **state)
{
    (void)state;
    const int order = 6;
    const int32_t terms = sw_zernike_count(order);
    double c[66];
    random_coefs(c, terms, 11);
    c[0] = 0.7; /* a piston: left out by the RMS about the mean */
    const double expect = sw_zernike_rms(c, terms, 1);
    const int32_t sizes[] = {64, 128, 256, 512, 1024};
    double err[5];
    for (int s = 0; s < 5; s++) {
        const int32_t n = sizes[s];
        sw_zmap_plan *plan = make_plan(n, order, 0.0, 0);
        sw_image w = map_of(plan, n, c, terms);
        double sum = 0.0, sum2 = 0.0;
        int64_t count = 0;
        for (int32_t k = 0; k < n; k++)
            for (int32_t i = 0; i < n; i++) {
                const double v = px(&w, i, k);
                if (isnan(v))
                    continue;
                sum += v;
                sum2 += v * v;
                count++;
            }
        const double mean = sum / count;
        const double rms = sqrt(sum2 / count - mean * mean);
        err[s] = fabs(rms / expect - 1.0);
        print_message("size %4d: RMS %.9f, sqrt(sum c_j^2) %.9f, relative error %.2e\n", (int)n,
                      rms, expect, err[s]);
        sw_image_free(&w);
        sw_zmap_destroy(plan);
    }
    /* Stated tolerance: 1e-3 relative at 512^2 (measured ~1e-4 or below), and the error falls
     * with the size (from 64 to 1024 at least 8 times). */
    assert_true(err[3] < 1e-3);
    assert_true(err[4] < err[0] / 8.0);
}

/* Bound on the float rounding of the sum: basis values and coefficients rounded to float and
 * J float additions, each at most 2^-24 relative, over sum_j |c_j| max|Z_j| (max|Z| = N_n^m). */
static double float_bound(const double *c, int32_t count)
{
    double s = 0.0;
    for (int32_t j = 0; j < count; j++) {
        int n, m;
        sw_zernike_osa_nm(j, &n, &m);
        s += fabs(c[j]) * (m == 0 ? sqrt(n + 1.0) : sqrt(2.0 * (n + 1.0)));
    }
    return (count + 2) * 0x1p-24 * s;
}

/* Pixel classification by the test's own geometry; 0 outside, 1 inside, -1 on an edge (within
 * 1e-12 of r = 1 or r = o, left unchecked). */
static int classify(int32_t i, int32_t k, int32_t n, double o)
{
    const double r = hypot(coord(i, n), coord(k, n));
    if (fabs(r - 1.0) < 1e-12 || (o > 0.0 && fabs(r - o) < 1e-12))
        return -1;
    return r <= 1.0 && r >= o;
}

/* Values at the pixel centres are sw_zernike_sum_grad's (float tolerance); NaN exactly outside
 * the pupil and inside the obscuration. Size 200 (not a multiple of 8: the last group of each
 * row is partial), order 8, obscuration 0.3. */
static void check_against_reference(int32_t n, int order, double o, int direct)
{
    const int32_t terms = sw_zernike_count(order);
    double c[66];
    random_coefs(c, terms, 23);
    sw_zmap_plan *plan = make_plan(n, order, o, 0);
    sw_image w;
    assert_int_equal(sw_image_alloc(cpu, n, n, SW_PIX_F32, &w), SW_OK);
    if (direct)
        assert_int_equal(sw_zmap_run_direct(plan, c, terms, &w), SW_OK);
    else
        assert_int_equal(sw_zmap_run(plan, c, terms, &w), SW_OK);
    /* direct: double sums rounded once to float */
    const double tol =
        direct ? 1e-6 * float_bound(c, terms) / ((terms + 2) * 0x1p-24) : float_bound(c, terms);
    int64_t inside = 0, outside = 0;
    double worst = 0.0;
    for (int32_t k = 0; k < n; k++)
        for (int32_t i = 0; i < n; i++) {
            const int cl = classify(i, k, n, o);
            const float v = px(&w, i, k);
            if (cl == 0) {
                assert_true(isnan(v));
                outside++;
            } else if (cl == 1) {
                double ref;
                sw_zernike_sum_grad(c, terms, coord(i, n), coord(k, n), &ref, NULL, NULL);
                assert_true(isfinite(v));
                worst = fmax(worst, fabs(v - ref));
                assert_near(v, ref, tol);
                inside++;
            }
        }
    print_message("%s size %d order %d o %.2f: max |W - sum_grad| = %.2e (tolerance %.2e)\n",
                  direct ? "direct" : "map", (int)n, order, o, worst, tol);
    assert_true(inside > 0 && (n == 1 || outside > 0));
    sw_image_free(&w);
    sw_zmap_destroy(plan);
}

static void test_values_match_sum_grad(void **state)
{
    (void)state;
    check_against_reference(200, 8, 0.3, 0);
    check_against_reference(37, 10, 0.0, 0);
    check_against_reference(8, 2, 0.0, 0);
    check_against_reference(1, 3, 0.0, 0); /* one pixel, at the centre */
}

static void test_direct_method(void **state)
{
    (void)state;
    check_against_reference(200, 8, 0.3, 1);
    check_against_reference(61, 10, 0.0, 1);
}

/* Half maps: each basis value rounded to half is within 2^-11 of itself (relative; subnormals
 * 2^-25 absolute), so per pixel |W_half - W_float| <= 2^-11 sum_j |c_j Z_j| + J 2^-25 max|c|
 * + the float rounding of both. Measured max error printed relative to the map's RMS. */
static void test_half_within_bound(void **state)
{
    (void)state;
    const int32_t n = 160;
    const int order = 10;
    const int32_t terms = sw_zernike_count(order);
    double c[66];
    random_coefs(c, terms, 31);
    sw_zmap_plan *pf = make_plan(n, order, 0.1, 0), *ph = make_plan(n, order, 0.1, 1);
    sw_image wf = map_of(pf, n, c, terms), wh = map_of(ph, n, c, terms);
    double cmax = 0.0;
    for (int32_t j = 0; j < terms; j++)
        cmax = fmax(cmax, fabs(c[j]));
    double worst = 0.0, worst_ratio = 0.0;
    int differ = 0;
    for (int32_t k = 0; k < n; k++)
        for (int32_t i = 0; i < n; i++) {
            const float a = px(&wf, i, k), b = px(&wh, i, k);
            assert_int_equal(isnan(a), isnan(b));
            if (isnan(a))
                continue;
            double s = 0.0;
            for (int32_t j = 0; j < terms; j++) {
                int nn, m;
                sw_zernike_osa_nm(j, &nn, &m);
                s += fabs(c[j] * sw_zernike_eval(nn, m, coord(i, n), coord(k, n)));
            }
            const double bound = 0x1p-11 * s + terms * 0x1p-25 * cmax + 2.0 * float_bound(c, terms);
            const double e = fabs((double)a - (double)b);
            assert_true(e <= bound);
            worst = fmax(worst, e);
            worst_ratio = fmax(worst_ratio, e / bound);
            differ += a != b;
        }
    print_message("half vs float, order 10, %dx%d: max |dW| = %.2e um (RMS of W %.3f um), "
                  "at most %.0f %% of the bound\n",
                  (int)n, (int)n, worst, sw_zernike_rms(c, terms, 1), 100.0 * worst_ratio);
    assert_true(differ > 0); /* the half maps really are half */
    sw_image_free(&wf);
    sw_image_free(&wh);
    sw_zmap_destroy(pf);
    sw_zmap_destroy(ph);
}

/* Fewer coefficients than terms: the missing ones are 0; none at all: 0 inside, NaN outside. */
static void test_count_below_terms(void **state)
{
    (void)state;
    const int32_t n = 64;
    double c[28] = {0}, full[28] = {0};
    random_coefs(c, 10, 5);
    memcpy(full, c, 10 * sizeof *c);
    sw_zmap_plan *plan = make_plan(n, 6, 0.0, 0);
    sw_image a = map_of(plan, n, c, 10), b = map_of(plan, n, full, 28), z = map_of(plan, n, c, 0);
    for (int32_t k = 0; k < n; k++)
        for (int32_t i = 0; i < n; i++) {
            const float va = px(&a, i, k), vb = px(&b, i, k), vz = px(&z, i, k);
            assert_int_equal(isnan(va), isnan(vz));
            if (isnan(va)) {
                assert_true(isnan(vb));
                continue;
            }
            assert_near(va, vb, float_bound(full, 28));
            assert_true(vz == 0.0f);
        }
    sw_image_free(&a);
    sw_image_free(&b);
    sw_image_free(&z);
    sw_zmap_destroy(plan);
}

/* ------------------------------------------------------------------ display */

static void test_wrap_values(void **state)
{
    (void)state;
    /* frac(W / 0.5 um) * 255, rounded: worked out by hand. */
    const float w[8] = {0.125f, -0.125f, 0.0f, 1.0f, NAN, 0.3f, -0.3f, 2.2f};
    const uint8_t expect[8] = {64, 191, 0, 0, 0, 153, 102, 102};
    sw_image map, out;
    assert_int_equal(sw_image_alloc(cpu, 4, 2, SW_PIX_F32, &map), SW_OK);
    assert_int_equal(sw_image_alloc(cpu, 4, 2, SW_PIX_U8, &out), SW_OK);
    for (int q = 0; q < 8; q++)
        ((float *)sw_image_row(&map, q / 4))[q % 4] = w[q];
    assert_int_equal(sw_zmap_wrap(cpu, &map, 0.5, &out), SW_OK);
    for (int q = 0; q < 8; q++)
        assert_int_equal(((uint8_t *)sw_image_row(&out, q / 4))[q % 4], expect[q]);
    /* bad input */
    sw_image bad;
    assert_int_equal(sw_image_alloc(cpu, 4, 3, SW_PIX_U8, &bad), SW_OK);
    assert_int_equal(sw_zmap_wrap(cpu, &map, 0.5, &bad), SW_EINVAL); /* size */
    assert_int_equal(sw_zmap_wrap(cpu, &map, 0.0, &out), SW_EINVAL); /* wavelength */
    assert_int_equal(sw_zmap_wrap(cpu, &map, NAN, &out), SW_EINVAL);
    assert_int_equal(sw_zmap_wrap(cpu, &out, 0.5, &out), SW_EINVAL); /* u8 map */
    assert_int_equal(sw_zmap_wrap(cpu, &map, 0.5, &map), SW_EINVAL); /* f32 out */
    assert_int_equal(sw_zmap_wrap(cpu, NULL, 0.5, &out), SW_EINVAL);
    sw_image_free(&bad);
    sw_image_free(&map);
    sw_image_free(&out);
}

/* The wrap of a real map: 0 outside the pupil, and each inside pixel equals the formula. */
static void test_wrap_of_map(void **state)
{
    (void)state;
    const int32_t n = 96;
    double c[15];
    random_coefs(c, 15, 3);
    sw_zmap_plan *plan = make_plan(n, 4, 0.25, 0);
    sw_image w = map_of(plan, n, c, 15), u;
    assert_int_equal(sw_image_alloc(cpu, n, n, SW_PIX_U8, &u), SW_OK);
    const double lambda = 0.55;
    assert_int_equal(sw_zmap_wrap(cpu, &w, lambda, &u), SW_OK);
    int nonzero = 0;
    for (int32_t k = 0; k < n; k++)
        for (int32_t i = 0; i < n; i++) {
            const float v = px(&w, i, k);
            const uint8_t got = ((uint8_t *)sw_image_row(&u, k))[i];
            if (isnan(v)) {
                assert_int_equal(got, 0);
                continue;
            }
            const double q = v / lambda, f = q - floor(q);
            assert_true(fabs(got - f * 255.0) <= 0.5 + 1e-9 || (got == 0 && f * 255.0 > 254.5));
            nonzero += got != 0;
        }
    assert_true(nonzero > n); /* the wavefront spans several waves: many levels are used */
    sw_image_free(&w);
    sw_image_free(&u);
    sw_zmap_destroy(plan);
}

static void test_png(void **state)
{
    (void)state;
    const int32_t n = 128;
    double c[28];
    random_coefs(c, 28, 9);
    sw_zmap_plan *plan = make_plan(n, 6, 0.2, 1);
    sw_image w = map_of(plan, n, c, 28);
    const char *path = sw_test_path("zmap.png");
    assert_int_equal(sw_zmap_write_png(cpu, path, &w), SW_OK);
    assert_true(sw_test_file_exists(path));
    size_t size = 0;
    unsigned char *buf = sw_test_read_all(path, &size);
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    assert_true(size > 33);
    assert_memory_equal(buf, sig, 8);
    free(buf);
    /* read back: wider than the map (the colour bar), RGBA, transparent outside the pupil and
     * in the obscuration, opaque inside */
    png_image pi;
    memset(&pi, 0, sizeof pi);
    pi.version = PNG_IMAGE_VERSION;
    assert_true(png_image_begin_read_from_file(&pi, path));
    assert_true(pi.width > (unsigned)n);
    assert_true(pi.height >= (unsigned)n);
    assert_true((pi.format & PNG_FORMAT_FLAG_ALPHA) != 0);
    pi.format = PNG_FORMAT_RGBA;
    unsigned char *rgba = malloc(PNG_IMAGE_SIZE(pi));
    assert_non_null(rgba);
    assert_true(png_image_finish_read(&pi, NULL, rgba, 0, NULL));
    const size_t row = (size_t)pi.width * 4;
    assert_int_equal(rgba[0 * row + 0 * 4 + 3], 0);                               /* corner */
    assert_int_equal(rgba[(size_t)(n / 2) * row + (size_t)(n / 2) * 4 + 3], 0);   /* obscured */
    assert_int_equal(rgba[(size_t)(n / 2) * row + (size_t)(n / 8) * 4 + 3], 255); /* r = 0.75 */
    free(rgba);
    /* a u8 image is not a map */
    sw_image u8;
    assert_int_equal(sw_image_alloc(cpu, n, n, SW_PIX_U8, &u8), SW_OK);
    assert_int_equal(sw_zmap_write_png(cpu, sw_test_path("bad.png"), &u8), SW_EINVAL);
    sw_image_free(&u8);
    sw_image_free(&w);
    sw_zmap_destroy(plan);
}

/* ------------------------------------------------------------------ bad input */

static void test_bad_params(void **state)
{
    (void)state;
    sw_zmap_params p;
    sw_zmap_plan *plan = (sw_zmap_plan *)&p; /* must be reset to NULL on failure */
    sw_zmap_params_default(&p);
    assert_int_equal(p.size, 256);
    assert_int_equal(p.max_order, 6);
    assert_int_equal(p.half, 0);
    assert_true(p.obscuration == 0.0);
    const struct {
        int32_t size, order;
        double o;
        int half;
    } bad[] = {{0, 6, 0, 0},    {-3, 6, 0, 0},    {8193, 6, 0, 0}, {64, 11, 0, 0}, {64, -1, 0, 0},
               {64, 6, 1.0, 0}, {64, 6, -0.1, 0}, {64, 6, NAN, 0}, {64, 6, 0, 2}};
    for (size_t t = 0; t < sizeof bad / sizeof bad[0]; t++) {
        p.size = bad[t].size;
        p.max_order = bad[t].order;
        p.obscuration = bad[t].o;
        p.half = bad[t].half;
        plan = (sw_zmap_plan *)&p;
        assert_int_equal(sw_zmap_create(cpu, &p, &plan), SW_EINVAL);
        assert_null(plan);
        assert_true(strlen(sw_context_error(cpu)) > 0);
    }
    assert_int_equal(sw_zmap_create(cpu, NULL, &plan), SW_EINVAL);
    sw_zmap_params_default(&p);
    assert_int_equal(sw_zmap_create(cpu, &p, NULL), SW_EINVAL);
    sw_zmap_destroy(NULL);
}

static void test_bad_run(void **state)
{
    (void)state;
    const int32_t n = 32;
    sw_zmap_plan *plan = make_plan(n, 4, 0.0, 0);
    double c[16] = {0};
    random_coefs(c, 15, 1);
    sw_image out, small, u8;
    assert_int_equal(sw_image_alloc(cpu, n, n, SW_PIX_F32, &out), SW_OK);
    assert_int_equal(sw_image_alloc(cpu, n, n - 1, SW_PIX_F32, &small), SW_OK);
    assert_int_equal(sw_image_alloc(cpu, n, n, SW_PIX_U8, &u8), SW_OK);
    for (int32_t k = 0; k < n; k++)
        for (int32_t i = 0; i < n; i++)
            ((float *)sw_image_row(&out, k))[i] = 42.0f;
    assert_int_equal(sw_zmap_run(plan, c, 16, &out), SW_EINVAL); /* count > 15 terms */
    assert_int_equal(sw_zmap_run(plan, c, -1, &out), SW_EINVAL);
    assert_int_equal(sw_zmap_run(plan, NULL, 15, &out), SW_EINVAL);
    assert_int_equal(sw_zmap_run(plan, c, 15, &small), SW_EINVAL);
    assert_int_equal(sw_zmap_run(plan, c, 15, &u8), SW_EINVAL);
    assert_int_equal(sw_zmap_run(plan, c, 15, NULL), SW_EINVAL);
    assert_int_equal(sw_zmap_run(NULL, c, 15, &out), SW_EINVAL);
    c[7] = NAN;
    assert_int_equal(sw_zmap_run(plan, c, 15, &out), SW_EINVAL);
    c[7] = INFINITY;
    assert_int_equal(sw_zmap_run(plan, c, 15, &out), SW_EINVAL);
    assert_int_equal(sw_zmap_run_direct(plan, c, 15, &out), SW_EINVAL);
    c[7] = 0.0;
    /* a device image on a CPU plan */
    sw_image dev = out;
    dev.memory = SW_MEM_DEVICE;
    dev.owned = 0;
    assert_int_equal(sw_zmap_run(plan, c, 15, &dev), SW_EINVAL);
    /* the refused runs left the output untouched */
    for (int32_t k = 0; k < n; k++)
        for (int32_t i = 0; i < n; i++)
            assert_true(px(&out, i, k) == 42.0f);
    assert_int_equal(sw_zmap_run(plan, c, 15, &out), SW_OK);
    assert_true(isnan(px(&out, 0, 0)));
    sw_image_free(&out);
    sw_image_free(&small);
    sw_image_free(&u8);
    sw_zmap_destroy(plan);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_half_known_values),
        cmocka_unit_test(test_half_round_trip_and_rounding),
        cmocka_unit_test(test_rms_orthonormality),
        cmocka_unit_test(test_values_match_sum_grad),
        cmocka_unit_test(test_direct_method),
        cmocka_unit_test(test_half_within_bound),
        cmocka_unit_test(test_count_below_terms),
        cmocka_unit_test(test_wrap_values),
        cmocka_unit_test(test_wrap_of_map),
        cmocka_unit_test(test_png),
        cmocka_unit_test(test_bad_params),
        cmocka_unit_test(test_bad_run),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

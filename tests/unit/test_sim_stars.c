/*
 * Star lists (stars.c): magnitudes (seed Eq. 1), catalogue CSVs and their bad rows, random
 * fields, the sky mode's pinhole projection and the truth table.
 */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DEG (3.14159265358979323846 / 180.0)

static const char *write_text(const char *name, const char *text)
{
    const char *path = sw_test_path(name);
    sw_test_write_file(path, text, strlen(text));
    return path;
}

static void expect_message(sw_context *ctx, const char *words)
{
    if (!strstr(sw_context_error(ctx), words))
        fail_msg("message \"%s\" lacks \"%s\"", sw_context_error(ctx), words);
}

/* ------------------------------------------------------------------ magnitudes */

static void test_magnitudes(void **state)
{
    (void)state;
    const double A = 1.7e6;
    assert_true(sw_mag_to_flux(0.0, A, 0.0) == A);
    assert_true(sw_mag_to_flux(0.0, A, 2.512) == A);
    /* Pogson: 5 magnitudes are a factor of 100, 10 of 10^4. */
    assert_near(sw_mag_to_flux(0.0, A, 0.0) / sw_mag_to_flux(5.0, A, 0.0), 100.0, 100.0 * 3e-16);
    assert_true(sw_mag_to_flux(5.0, 1.0, 0.0) == 0.01);
    assert_true(sw_mag_to_flux(10.0, 1.0, -1.0) == 1e-4);
    assert_near(sw_mag_to_flux(1.0, A, 0.0), A / pow(10.0, 0.4), A * 1e-15);
    /* The seed's 2.512. */
    for (double m = -2; m <= 15; m += 0.75) {
        assert_near(sw_mag_to_flux(m, A, 2.512), A * pow(2.512, -m), A * pow(2.512, -m) * 1e-15);
        assert_near(sw_flux_to_mag(sw_mag_to_flux(m, A, 2.512), A, 2.512), m, 1e-12);
        assert_near(sw_flux_to_mag(sw_mag_to_flux(m, A, 0.0), A, 0.0), m, 1e-12);
    }
    assert_near(sw_mag_to_flux(1.0, 1.0, 2.512), 1.0 / 2.512, 1e-16);
    /* 2.512 is not Pogson's ratio: 5 magnitudes differ from 100 by 0.0019%. */
    assert_true(fabs(sw_mag_to_flux(0, A, 2.512) / sw_mag_to_flux(5, A, 2.512) - 100.0) > 1e-3);
    assert_true(isinf(sw_flux_to_mag(0.0, A, 0.0)));
    assert_true(isnan(sw_flux_to_mag(-1.0, A, 0.0)));
    assert_true(isnan(sw_flux_to_mag(1.0, 0.0, 0.0)));
    assert_near(sw_flux_to_mag(A / 100.0, A, 0.0), 5.0, 1e-14);
}

/* ------------------------------------------------------------------ catalogues */

static void test_catalogue_csv(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(0);
    const double A = 1e5;
    sw_stars s;
    /* mag only, extra columns ignored, comments and blank lines skipped. */
    const char *p = write_text("mag.csv", "# a catalogue\nid,x_px,y_px,mag\n1,10.5,20.25,2\n\n"
                                          "2,-3,4e2,0\n3,0,0,7.5\n");
    assert_int_equal(sw_stars_read_csv(ctx, p, A, 0.0, &s), SW_OK);
    assert_int_equal(s.count, 3);
    assert_true(s.x[0] == 10.5 && s.y[0] == 20.25 && s.x[1] == -3 && s.y[1] == 400);
    assert_near(s.flux[0], A * 0.01 * pow(10.0, 0.4 * 3), 1e-9); /* 10^-0.8 */
    assert_near(s.flux[1], A, 0);
    assert_true(s.mag[2] == 7.5);
    sw_stars_free(&s);
    /* ratio 2.512 */
    assert_int_equal(sw_stars_read_csv(ctx, p, A, 2.512, &s), SW_OK);
    assert_near(s.flux[0], A / (2.512 * 2.512), 1e-9);
    sw_stars_free(&s);
    /* flux only: mag is NaN. */
    p = write_text("flux.csv", "x_px,y_px,flux_e\n1,2,300\n4,5,0\n");
    assert_int_equal(sw_stars_read_csv(ctx, p, A, 0.0, &s), SW_OK);
    assert_int_equal(s.count, 2);
    assert_true(s.flux[0] == 300 && s.flux[1] == 0);
    assert_true(isnan(s.mag[0]));
    sw_stars_free(&s);
    /* Both: flux_e gives the flux, mag is kept as given. */
    p = write_text("both.csv", "mag,flux_e,y_px,x_px\n3,777,2,1\n");
    assert_int_equal(sw_stars_read_csv(ctx, p, A, 0.0, &s), SW_OK);
    assert_true(s.flux[0] == 777 && s.mag[0] == 3 && s.x[0] == 1 && s.y[0] == 2);
    sw_stars_free(&s);
    /* Header only: no stars. */
    p = write_text("empty.csv", "x_px,y_px,mag\n");
    assert_int_equal(sw_stars_read_csv(ctx, p, A, 0.0, &s), SW_OK);
    assert_int_equal(s.count, 0);
    sw_stars_free(&s);
    sw_context_destroy(ctx);
}

static void expect_csv_fails(sw_context *ctx, const char *name, const char *text, sw_status want,
                             const char *words)
{
    sw_stars s;
    memset(&s, 0x5a, sizeof s);
    const char *p = write_text(name, text);
    assert_int_equal(sw_stars_read_csv(ctx, p, 1e5, 0.0, &s), want);
    expect_message(ctx, words);
    assert_int_equal(s.count, 0);
    assert_null(s.x);
}

static void test_catalogue_bad_rows(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(0);
    expect_csv_fails(ctx, "b1.csv", "x_px,y_px,mag\n1,2,3\n1,two,3\n", SW_EFORMAT, "line 3");
    expect_csv_fails(ctx, "b2.csv", "x_px,y_px,mag\n1,2\n", SW_EFORMAT, "line 2");
    expect_csv_fails(ctx, "b3.csv", "x_px,mag\n1,2\n", SW_EFORMAT, "y_px");
    expect_csv_fails(ctx, "b4.csv", "x_px,y_px\n1,2\n", SW_EFORMAT, "flux_e");
    expect_csv_fails(ctx, "b5.csv", "x_px,y_px,mag\n1,2,3\nnan,2,3\n", SW_EFORMAT,
                     "data row 2: position");
    expect_csv_fails(ctx, "b6.csv", "x_px,y_px,flux_e\n1,inf,3\n", SW_EFORMAT, "position");
    expect_csv_fails(ctx, "b7.csv", "x_px,y_px,flux_e\n1,2,-3\n", SW_EFORMAT, "flux_e -3");
    expect_csv_fails(ctx, "b8.csv", "x_px,y_px,mag\n1,2,nan\n", SW_EFORMAT, "mag");
    expect_csv_fails(ctx, "b9.csv", "x_px,y_px,mag\n1,2,-1000\n", SW_EFORMAT, "not finite");
    expect_csv_fails(ctx, "b10.csv", "ra_deg,dec_deg,mag\n1,2,3\n", SW_EFORMAT, "sky mode");
    expect_csv_fails(ctx, "b11.csv", "", SW_EFORMAT, "no header");
    sw_stars s;
    assert_int_equal(sw_stars_read_csv(ctx, sw_test_path("missing.csv"), 1e5, 0, &s), SW_EIO);
    expect_message(ctx, "missing.csv");
    const char *p = write_text("ok.csv", "x_px,y_px,mag\n1,2,3\n");
    assert_int_equal(sw_stars_read_csv(ctx, p, -1, 0, &s), SW_EINVAL);
    expect_message(ctx, "zero point");
    assert_int_equal(sw_stars_read_csv(ctx, p, 1e5, 1.0, &s), SW_EINVAL);
    assert_int_equal(sw_stars_read_csv(ctx, p, NAN, 0, &s), SW_EINVAL);
    assert_int_equal(sw_stars_read_csv(ctx, p, 1e5, 0, NULL), SW_EINVAL);
    assert_int_equal(sw_stars_alloc(ctx, -1, &s), SW_EINVAL);
    sw_stars_free(NULL);
    sw_context_destroy(ctx);
}

/* ------------------------------------------------------------------ random fields */

static void test_random_stars(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(0);
    const int64_t n = 20000;
    sw_stars a, b, c;
    assert_int_equal(sw_stars_random(ctx, n, 300, 200, 2.0, 9.0, 1e6, 0.0, 42, &a), SW_OK);
    assert_int_equal(sw_stars_random(ctx, n, 300, 200, 2.0, 9.0, 1e6, 0.0, 42, &b), SW_OK);
    assert_int_equal(sw_stars_random(ctx, n, 300, 200, 2.0, 9.0, 1e6, 0.0, 43, &c), SW_OK);
    assert_int_equal(a.count, n);
    assert_memory_equal(a.x, b.x, (size_t)n * sizeof(double));
    assert_memory_equal(a.mag, b.mag, (size_t)n * sizeof(double));
    int same = 0;
    double sx = 0, sy = 0, sm = 0;
    for (int64_t i = 0; i < n; i++) {
        same += a.x[i] == c.x[i];
        assert_true(a.x[i] >= -0.5 && a.x[i] < 299.5);
        assert_true(a.y[i] >= -0.5 && a.y[i] < 199.5);
        assert_true(a.mag[i] >= 2.0 && a.mag[i] < 9.0);
        assert_true(a.flux[i] == sw_mag_to_flux(a.mag[i], 1e6, 0.0));
        sx += a.x[i];
        sy += a.y[i];
        sm += a.mag[i];
    }
    assert_int_equal(same, 0);
    /* Uniform: means within 5 standard errors (side / sqrt(12 n)). */
    assert_near(sx / n, 149.5, 5 * 300 / sqrt(12.0 * n));
    assert_near(sy / n, 99.5, 5 * 200 / sqrt(12.0 * n));
    assert_near(sm / n, 5.5, 5 * 7 / sqrt(12.0 * n));
    /* Star i is the same whatever the count (draw i). */
    sw_stars d;
    assert_int_equal(sw_stars_random(ctx, 10, 300, 200, 2.0, 9.0, 1e6, 0.0, 42, &d), SW_OK);
    assert_memory_equal(d.y, a.y, 10 * sizeof(double));
    sw_stars_free(&d);
    assert_int_equal(sw_stars_random(ctx, 0, 300, 200, 2.0, 9.0, 1e6, 0.0, 42, &d), SW_OK);
    assert_int_equal(d.count, 0);
    assert_int_equal(sw_stars_random(ctx, 5, 300, 200, 9.0, 2.0, 1e6, 0.0, 42, &d), SW_EINVAL);
    expect_message(ctx, "magnitude range");
    assert_int_equal(sw_stars_random(ctx, 5, 0, 200, 2.0, 9.0, 1e6, 0.0, 42, &d), SW_EINVAL);
    assert_int_equal(sw_stars_random(ctx, 5, 300, 200, NAN, 9.0, 1e6, 0.0, 42, &d), SW_EINVAL);
    sw_stars_free(&a);
    sw_stars_free(&b);
    sw_stars_free(&c);
    sw_context_destroy(ctx);
}

/* ------------------------------------------------------------------ sky mode */

static sw_camera camera(double ra, double dec, double roll)
{
    sw_camera c;
    c.ra_deg = ra;
    c.dec_deg = dec;
    c.roll_deg = roll;
    c.focal_mm = 50.0;
    c.pixel_um = 5.0; /* f / p = 10000 px */
    c.width = 1024;
    c.height = 768;
    return c;
}

static void test_sky_projection(void **state)
{
    (void)state;
    const double scale = 10000.0, cx = 511.5, cy = 383.5, a = 0.8; /* degrees */
    const double t = scale * tan(a * DEG);
    double x, y;
    /* The boresight lands at the image centre, whatever the attitude. */
    const double att[][3] = {{0, 0, 0}, {123.4, -47.5, 33}, {300, 89.9, -120}, {10, -90, 45}};
    for (int k = 0; k < 4; k++) {
        sw_camera c = camera(att[k][0], att[k][1], att[k][2]);
        assert_int_equal(sw_camera_check(NULL, &c), SW_OK);
        assert_int_equal(sw_camera_project(&c, att[k][0], att[k][1], &x, &y), 1);
        assert_near(x, cx, 1e-9);
        assert_near(y, cy, 1e-9);
    }
    /* Roll 0 at Dec 0: east (increasing RA) is left, north up. */
    sw_camera c = camera(40, 0, 0);
    assert_int_equal(sw_camera_project(&c, 40 + a, 0, &x, &y), 1);
    assert_near(x, cx - t, 1e-8);
    assert_near(y, cy, 1e-8);
    assert_int_equal(sw_camera_project(&c, 40, a, &x, &y), 1);
    assert_near(x, cx, 1e-8);
    assert_near(y, cy - t, 1e-8);
    /* A pinhole, not a linear map: 20 degrees off axis lands at f/p tan(20). */
    assert_int_equal(sw_camera_project(&c, 20, 0, &x, &y), 1);
    assert_near(x, cx + scale * tan(20 * DEG), 1e-6);
    /* Roll 90: east up, north towards +x. */
    c = camera(40, 0, 90);
    assert_int_equal(sw_camera_project(&c, 40 + a, 0, &x, &y), 1);
    assert_near(x, cx, 1e-8);
    assert_near(y, cy - t, 1e-8);
    assert_int_equal(sw_camera_project(&c, 40, a, &x, &y), 1);
    assert_near(x, cx + t, 1e-8);
    assert_near(y, cy, 1e-8);
    /* Any roll, any Dec: a star a degrees north of the boresight lies on the meridian, at
     * f/p tan(a) from the centre in the direction (sin roll, -cos roll). */
    c = camera(123.4, -47.5, 33);
    assert_int_equal(sw_camera_project(&c, 123.4, -47.5 + a, &x, &y), 1);
    assert_near(x, cx + t * sin(33 * DEG), 1e-7);
    assert_near(y, cy - t * cos(33 * DEG), 1e-7);
    /* Behind the camera, and just beyond 90 degrees off axis. */
    assert_int_equal(sw_camera_project(&c, 123.4 + 180, 47.5, &x, &y), 0);
    assert_true(isnan(x) && isnan(y));
    c = camera(0, 0, 0);
    assert_int_equal(sw_camera_project(&c, 90.5, 0, &x, &y), 0);
    /* Bad cameras. */
    sw_camera bad = camera(0, 91, 0);
    assert_int_equal(sw_camera_check(NULL, &bad), SW_EINVAL);
    bad = camera(NAN, 0, 0);
    assert_int_equal(sw_camera_check(NULL, &bad), SW_EINVAL);
    bad = camera(0, 0, 0), bad.focal_mm = 0;
    assert_int_equal(sw_camera_check(NULL, &bad), SW_EINVAL);
    bad = camera(0, 0, 0), bad.pixel_um = -5;
    assert_int_equal(sw_camera_check(NULL, &bad), SW_EINVAL);
    bad = camera(0, 0, 0), bad.width = 0;
    assert_int_equal(sw_camera_check(NULL, &bad), SW_EINVAL);
    assert_int_equal(sw_camera_check(NULL, NULL), SW_EINVAL);
}

static void test_sky_field(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(0);
    sw_camera c = camera(200, 30, 0);
    /* The image spans x in [-0.5, 1023.5): 511.5 + 10000 tan(da) with the offset along RA at
     * Dec 30 not exactly a great circle, so place stars by the projection's own inverse along
     * the Dec axis: north of the centre by 383.5 + 3 px (outside by 2.5) and by 383.5 - 3. */
    const double out3 = atan((383.5 + 3.0) / 10000.0) / DEG, in3 = atan(380.5 / 10000.0) / DEG;
    const double ra[5] = {200, 200, 200, 20, 200.01};
    const double dec[5] = {30, 30 + out3, 30 + in3, -30, 30};
    const double flux[5] = {1, 2, 3, 4, 5};
    const double mag[5] = {10, 11, 12, 13, 14};
    sw_stars s;
    assert_int_equal(sw_stars_from_sky(ctx, &c, 5, ra, dec, flux, mag, 0.0, &s), SW_OK);
    assert_int_equal(s.count, 3); /* the one outside and the one behind are dropped */
    assert_true(s.flux[0] == 1 && s.flux[1] == 3 && s.flux[2] == 5 && s.mag[1] == 12);
    assert_near(s.y[1], 3.0, 1e-6);
    assert_true(s.x[2] < 511.5); /* east is left */
    sw_stars_free(&s);
    /* A margin of 5 px keeps the star 2.5 px beyond the edge. */
    assert_int_equal(sw_stars_from_sky(ctx, &c, 5, ra, dec, flux, NULL, 5.0, &s), SW_OK);
    assert_int_equal(s.count, 4);
    assert_near(s.y[1], -3.0, 1e-6);
    assert_true(isnan(s.mag[0]));
    sw_stars_free(&s);
    double bad_dec[5] = {30, 30, NAN, 0, 0};
    assert_int_equal(sw_stars_from_sky(ctx, &c, 5, ra, bad_dec, flux, NULL, 0.0, &s), SW_EINVAL);
    assert_int_equal(sw_stars_from_sky(ctx, &c, 5, ra, dec, flux, NULL, -1.0, &s), SW_EINVAL);

    /* The same through a CSV. */
    char text[512];
    snprintf(text, sizeof text, "ra_deg,dec_deg,mag\n200,30,0\n200,%.17g,5\n20,-30,1\n", 30 + in3);
    const char *p = write_text("sky.csv", text);
    assert_int_equal(sw_stars_read_sky_csv(ctx, p, &c, 1000.0, 0.0, 0.0, &s), SW_OK);
    assert_int_equal(s.count, 2);
    assert_near(s.x[0], 511.5, 1e-9);
    assert_near(s.y[0], 383.5, 1e-9);
    assert_near(s.flux[1], 10.0, 1e-12);
    sw_stars_free(&s);
    p = write_text("sky_bad.csv", "ra_deg,mag\n1,2\n");
    assert_int_equal(sw_stars_read_sky_csv(ctx, p, &c, 1000.0, 0.0, 0.0, &s), SW_EFORMAT);
    expect_message(ctx, "dec_deg");
    p = write_text("sky_bad2.csv", "ra_deg,dec_deg,mag\n1,95,2\n");
    assert_int_equal(sw_stars_read_sky_csv(ctx, p, &c, 1000.0, 0.0, 0.0, &s), SW_EFORMAT);
    expect_message(ctx, "data row 1");
    p = write_text("sky_bad3.csv", "ra_deg,dec_deg,mag\n1,x,2\n");
    assert_int_equal(sw_stars_read_sky_csv(ctx, p, &c, 1000.0, 0.0, 0.0, &s), SW_EFORMAT);
    sw_context_destroy(ctx);
}

/* ------------------------------------------------------------------ truth table */

static void test_truth_table(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(0);
    sw_stars s;
    assert_int_equal(sw_stars_alloc(ctx, 6, &s), SW_OK);
    const double xs[6] = {-0.5, -0.5000001, 9.4999999, 9.5, 3.25, 4};
    const double ys[6] = {0, 0, 0, 0, 7.4999, 7.5};
    for (int i = 0; i < 6; i++) {
        s.x[i] = xs[i];
        s.y[i] = ys[i];
        s.flux[i] = 100 + i;
        s.mag[i] = i == 4 ? NAN : 20 + i;
    }
    const char *path = sw_test_path("truth.csv");
    int64_t n = -1;
    assert_int_equal(sw_stars_write_truth(ctx, path, &s, 10, 8, &n), SW_OK);
    assert_int_equal(n, 3);
    size_t size;
    char *text = sw_test_read_all(path, &size);
    assert_true(strncmp(text, "x_px,y_px,flux_e,mag\n", 21) == 0);
    free(text);
    sw_table t;
    assert_int_equal(sw_csv_read(ctx, path, &t), SW_OK);
    assert_int_equal(t.nrows, 3);
    assert_true(t.cols[0][0] == -0.5 && t.cols[0][1] == 9.4999999 && t.cols[0][2] == 3.25);
    assert_true(t.cols[2][1] == 102 && t.cols[3][1] == 22 && isnan(t.cols[3][2]));
    assert_true(t.cols[1][2] == 7.4999);
    sw_table_free(&t);
    assert_int_equal(sw_stars_write_truth(ctx, path, NULL, 10, 8, &n), SW_EINVAL);
    assert_int_equal(sw_stars_write_truth(ctx, path, &s, 0, 8, &n), SW_EINVAL);
    assert_int_equal(sw_stars_write_truth(ctx, sw_test_path("no/such/dir.csv"), &s, 10, 8, &n),
                     SW_EIO);
    sw_stars_free(&s);
    sw_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_magnitudes),         cmocka_unit_test(test_catalogue_csv),
        cmocka_unit_test(test_catalogue_bad_rows), cmocka_unit_test(test_random_stars),
        cmocka_unit_test(test_sky_projection),     cmocka_unit_test(test_sky_field),
        cmocka_unit_test(test_truth_table),
    };
    return cmocka_run_group_tests_name("sim_stars", tests, NULL, NULL);
}

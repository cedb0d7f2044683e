/*
 * The NXmx geometry of an Eiger master (sw_h5_read_geometry): a master written by spotwave, its
 * geometry datasets then added with HDF5 directly as NXmx files have them (units attributes as
 * fixed and variable-length strings), read back exactly in spotwave's units; unusable fields
 * (unknown units, a vector where a scalar belongs, a negative distance) left out; the module
 * orientation from fast/slow_pixel_direction and their depends_on chain (translations, and a
 * 90-degree two-theta rotation), against the positions worked out by hand. A master of two
 * modules (NXdetector_module groups with data_origin, data_size, and one with its own pixel
 * directions): sw_h5_read_modules gives their rectangles and the placed one's origin in frame
 * pixels; layouts that do not hold together give none; and `spotwave find` (when the tests are
 * told where it is, SW_CLI) takes the modules as panels without --panels: the gap between them
 * masked, each spot's panel number right, no spot across the gap, the placed module's spots'
 * d-spacings from its own placement.
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put(hid_t f, const char *path, double v, const char *units, int vlen, int n)
{
    hsize_t dims[1] = {(hsize_t)n};
    hid_t sp = n == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, dims, NULL);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t d = H5Dcreate2(f, path, H5T_IEEE_F64LE, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(d >= 0);
    double vals[3] = {v, v, v};
    assert_true(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, vals) >= 0);
    if (units) {
        hid_t st = H5Tcopy(H5T_C_S1);
        H5Tset_size(st, vlen ? H5T_VARIABLE : strlen(units));
        hid_t as = H5Screate(H5S_SCALAR);
        hid_t a = H5Acreate2(d, "units", st, as, H5P_DEFAULT, H5P_DEFAULT);
        assert_true(a >= 0);
        if (vlen)
            assert_true(H5Awrite(a, st, &units) >= 0);
        else
            assert_true(H5Awrite(a, st, units) >= 0);
        H5Aclose(a);
        H5Sclose(as);
        H5Tclose(st);
    }
    H5Dclose(d);
    H5Pclose(lcpl);
    H5Sclose(sp);
}

static void nxmx_geometry(void **state)
{
    (void)state;
    sw_image img = sw_test_random_image(16, 12, SW_PIX_U16, 4);
    const char *path = sw_test_path("nx_master.h5");
    assert_int_equal(sw_h5_write(NULL, path, &img, 1, 0, SW_H5_NONE, NULL, 65535.0), SW_OK);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    assert_true(f >= 0);
    put(f, "/entry/instrument/beam/incident_wavelength", 0.9762, "angstrom", 0, 1);
    put(f, "/entry/instrument/detector/detector_distance", 0.15, "m", 1, 1);
    put(f, "/entry/instrument/detector/beam_center_x", 8.25, "pixel", 0, 1);
    put(f, "/entry/instrument/detector/beam_center_y", 6.5, NULL, 0, 1);
    put(f, "/entry/instrument/detector/x_pixel_size", 7.5e-5, "m", 0, 1);
    put(f, "/entry/instrument/detector/y_pixel_size", 75.0, "um", 1, 1);
    put(f, "/entry/instrument/detector/count_time", 0.004999, "s", 0, 1);
    H5Fclose(f);

    sw_h5_reader *r = NULL;
    assert_int_equal(sw_h5_open(NULL, path, NULL, &r), SW_OK);
    sw_diffraction_geometry g;
    assert_int_equal(sw_h5_read_geometry(r, &g), SW_OK);
    assert_int_equal(g.have, SW_DG_WAVELENGTH | SW_DG_DISTANCE | SW_DG_BEAM | SW_DG_PIXEL |
                                 SW_DG_OVERLOAD | SW_DG_EXPOSURE);
    assert_true(g.wavelength_a == 0.9762);
    assert_true(fabs(g.distance_mm - 150.0) < 1e-12);
    assert_true(g.beam_x_px == 7.75 && g.beam_y_px == 6.0); /* NXmx edges -> spotwave centres */
    assert_true(fabs(g.pixel_x_mm - 0.075) < 1e-15 && fabs(g.pixel_y_mm - 0.075) < 1e-15);
    assert_true(g.exposure_s == 0.004999);
    assert_true(g.overload == 65535.0);
    assert_int_equal(sw_diffraction_geometry_check(NULL, &g), SW_OK);
    sw_h5_close(r);

    /* unusable fields are left out; the file still opens */
    assert_int_equal(sw_h5_write(NULL, path, &img, 1, 0, SW_H5_NONE, NULL, 0.0), SW_OK);
    f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    put(f, "/entry/instrument/beam/incident_wavelength", 1.0, "furlong", 0, 1);
    put(f, "/entry/instrument/detector/detector_distance", -0.15, "m", 0, 1);
    put(f, "/entry/instrument/detector/beam_center_x", 8.0, "pixel", 0, 3);
    put(f, "/entry/instrument/detector/beam_center_y", 6.0, "pixel", 0, 1);
    put(f, "/entry/instrument/detector/x_pixel_size", 7.5e-5, NULL, 0, 1);
    put(f, "/entry/instrument/detector/y_pixel_size", 7.5e-5, NULL, 0, 1);
    H5Fclose(f);
    assert_int_equal(sw_h5_open(NULL, path, NULL, &r), SW_OK);
    assert_int_equal(sw_h5_read_geometry(r, &g), SW_OK);
    assert_int_equal(g.have, SW_DG_PIXEL); /* metres when no unit is given */
    assert_true(fabs(g.pixel_x_mm - 0.075) < 1e-15);
    sw_h5_close(r);
    assert_int_equal(sw_h5_read_geometry(NULL, &g), SW_EINVAL);
    assert_int_equal(g.have, 0u);
    sw_image_free(&img);
}

static void str_attr(hid_t d, const char *name, const char *v)
{
    hid_t st = H5Tcopy(H5T_C_S1);
    H5Tset_size(st, strlen(v));
    hid_t as = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(d, name, st, as, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(a >= 0 && H5Awrite(a, st, v) >= 0);
    H5Aclose(a);
    H5Sclose(as);
    H5Tclose(st);
}

static void vec_attr(hid_t d, const char *name, double x, double y, double z)
{
    hsize_t n = 3;
    hid_t as = H5Screate_simple(1, &n, NULL);
    hid_t a = H5Acreate2(d, name, H5T_IEEE_F64LE, as, H5P_DEFAULT, H5P_DEFAULT);
    const double v[3] = {x, y, z};
    assert_true(a >= 0 && H5Awrite(a, H5T_NATIVE_DOUBLE, v) >= 0);
    H5Aclose(a);
    H5Sclose(as);
}

/* A NeXus transformation: value (units), type, vector, offset (m), depends_on. */
static void transform(hid_t f, const char *path, double value, const char *units, const char *type,
                      const double vec[3], const double off[3], const char *dep)
{
    put(f, path, value, units, 0, 1);
    hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
    assert_true(d >= 0);
    str_attr(d, "transformation_type", type);
    vec_attr(d, "vector", vec[0], vec[1], vec[2]);
    if (off) {
        vec_attr(d, "offset", off[0], off[1], off[2]);
        str_attr(d, "offset_units", "m");
    }
    str_attr(d, "depends_on", dep);
    H5Dclose(d);
}

static void nxmx_orientation(void **state)
{
    (void)state;
    sw_image img = sw_test_random_image(16, 12, SW_PIX_U16, 4);
    const char *path = sw_test_path("nx_orient.h5");
    const double z[3] = {0, 0, 1}, x[3] = {1, 0, 0}, mx[3] = {-1, 0, 0}, my[3] = {0, -1, 0},
                 y[3] = {0, 1, 0}, off[3] = {-0.0006, 0.00045, 0}, none[3] = {0, 0, 0};
    for (int rot = 0; rot < 2; rot++) {
        assert_int_equal(sw_h5_write(NULL, path, &img, 1, 0, SW_H5_NONE, NULL, 0.0), SW_OK);
        hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
        assert_true(f >= 0);
        transform(f, "/entry/instrument/detector/transformations/translation", 0.15, "m",
                  "translation", z, NULL,
                  rot ? "/entry/instrument/detector/transformations/two_theta" : ".");
        if (rot)
            transform(f, "/entry/instrument/detector/transformations/two_theta", 90.0, "deg",
                      "rotation", y, NULL, ".");
        transform(f, "/entry/instrument/detector/module/module_offset", 0.0, "m", "translation", x,
                  off, "/entry/instrument/detector/transformations/translation");
        /* relative depends_on, as NeXus allows */
        transform(f, "/entry/instrument/detector/module/fast_pixel_direction", 7.5e-5, "m",
                  "translation", mx, none, "module_offset");
        transform(f, "/entry/instrument/detector/module/slow_pixel_direction", 7.5e-5, "m",
                  "translation", my, none, "/entry/instrument/detector/module/module_offset");
        H5Fclose(f);
        sw_h5_reader *r = NULL;
        assert_int_equal(sw_h5_open(NULL, path, NULL, &r), SW_OK);
        sw_diffraction_geometry g;
        assert_int_equal(sw_h5_read_geometry(r, &g), SW_OK);
        sw_h5_close(r);
        assert_true(g.have & SW_DG_ORIENTATION);
        assert_int_equal(g.orientation, 1);
        assert_true(g.have & SW_DG_PIXEL); /* from the directions' values */
        assert_true(fabs(g.pixel_x_mm - 0.075) < 1e-12 && fabs(g.pixel_y_mm - 0.075) < 1e-12);
        /* corner (-0.6, 0.45, 150) mm; the first pixel's centre half a pixel along fast, slow */
        const double want_o[2][3] = {{-0.6375, 0.4125, 150.0}, {150.0, 0.4125, 0.6375}};
        const double want_f[2][3] = {{-1, 0, 0}, {0, 0, 1}};
        for (int i = 0; i < 3; i++) {
            assert_near(g.origin_mm[i], want_o[rot][i], 1e-9);
            assert_near(g.fast[i], want_f[rot][i], 1e-12);
            assert_near(g.slow[i], my[i], 1e-12);
        }
    }
    /* a chain that loops: no orientation, the file still opens */
    assert_int_equal(sw_h5_write(NULL, path, &img, 1, 0, SW_H5_NONE, NULL, 0.0), SW_OK);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    transform(f, "/entry/instrument/detector/module/module_offset", 0.0, "m", "translation", x, off,
              "/entry/instrument/detector/module/module_offset");
    transform(f, "/entry/instrument/detector/module/fast_pixel_direction", 7.5e-5, "m",
              "translation", mx, none, "module_offset");
    transform(f, "/entry/instrument/detector/module/slow_pixel_direction", 7.5e-5, "m",
              "translation", my, none, "module_offset");
    H5Fclose(f);
    sw_h5_reader *r = NULL;
    assert_int_equal(sw_h5_open(NULL, path, NULL, &r), SW_OK);
    sw_diffraction_geometry g;
    assert_int_equal(sw_h5_read_geometry(r, &g), SW_OK);
    sw_h5_close(r);
    assert_false(g.have & SW_DG_ORIENTATION);
    assert_int_equal(g.orientation, 0);
    sw_image_free(&img);
}

/* An NXdetector_module group at path (data_origin [y0, x0], data_size [h, w]; n values each). */
static void module_group(hid_t f, const char *path, int y0, int x0, int h, int w, int n)
{
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t g = H5Gcreate2(f, path, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(g >= 0);
    str_attr(g, "NX_class", "NXdetector_module");
    const int64_t org[3] = {y0, x0, 0}, size[3] = {h, w, 1};
    hsize_t dims[1] = {(hsize_t)n};
    hid_t sp = H5Screate_simple(1, dims, NULL);
    for (int k = 0; k < 2; k++) {
        hid_t d = H5Dcreate2(g, k ? "data_size" : "data_origin", H5T_STD_I32LE, sp, H5P_DEFAULT,
                             H5P_DEFAULT, H5P_DEFAULT);
        assert_true(d >= 0);
        assert_true(H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, k ? size : org) >=
                    0);
        H5Dclose(d);
    }
    H5Sclose(sp);
    H5Gclose(g);
    H5Pclose(lcpl);
}

#define MW    40 /* the frame: 40 x 30, module A columns 0..17, a gap 18..21, module B 22..39 */
#define MH    30
#define PIX   7.5e-5 /* m */
#define DIST  0.05   /* m */
#define BX    19.5   /* the beam, NXmx pixels (edges at whole numbers) */
#define BY    14.5
#define SHIFT 0.005 /* m: module B lies this much further along +x than the flat model says */

/* A master of two frames and two modules; module B placed by its own pixel directions. */
static const char *two_module_master(const char *name, sw_image fr[2])
{
    for (int k = 0; k < 2; k++) {
        assert_int_equal(sw_image_alloc(NULL, MW, MH, SW_PIX_U16, &fr[k]), SW_OK);
        for (int32_t y = 0; y < MH; y++)
            for (int32_t x = 0; x < MW; x++)
                ((uint16_t *)sw_image_row(&fr[k], y))[x] = (uint16_t)((x * 7 + y * 3 + k) % 3);
        /* a spot on each module and one across the gap (columns 17..22) */
        const int sx[3] = {8, 30, 19}, sy[3] = {10, 15, 22}, half[3] = {1, 1, 3};
        for (int s = 0; s < 3; s++)
            for (int dy = -1; dy <= 1; dy++)
                for (int dx = -half[s]; dx <= half[s]; dx++)
                    ((uint16_t *)sw_image_row(&fr[k], sy[s] + dy))[sx[s] + dx] =
                        (uint16_t)(400 + 300 * (dx == 0 && dy == 0));
    }
    const char *path = sw_test_path(name);
    assert_int_equal(sw_h5_write(NULL, path, fr, 2, 0, SW_H5_NONE, NULL, 0.0), SW_OK);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    assert_true(f >= 0);
    put(f, "/entry/instrument/beam/incident_wavelength", 1.0, "angstrom", 0, 1);
    put(f, "/entry/instrument/detector/detector_distance", DIST, "m", 0, 1);
    put(f, "/entry/instrument/detector/beam_center_x", BX, "pixel", 0, 1);
    put(f, "/entry/instrument/detector/beam_center_y", BY, "pixel", 0, 1);
    put(f, "/entry/instrument/detector/x_pixel_size", PIX, "m", 0, 1);
    put(f, "/entry/instrument/detector/y_pixel_size", PIX, "m", 0, 1);
    module_group(f, "/entry/instrument/detector/module_a", 0, 0, MH, 18, 2);
    module_group(f, "/entry/instrument/detector/module_b", 0, 22, MH, 18, 2);
    /* module B's first pixel's corner: where the flat model puts it, SHIFT further along x */
    const double x[3] = {1, 0, 0}, y[3] = {0, 1, 0}, none[3] = {0, 0, 0};
    const double corner[3] = {(22.0 - BX) * PIX + SHIFT, (0.0 - BY) * PIX, DIST};
    transform(f, "/entry/instrument/detector/module_b/module_offset", 0.0, "m", "translation", x,
              corner, ".");
    transform(f, "/entry/instrument/detector/module_b/fast_pixel_direction", PIX, "m",
              "translation", x, none, "module_offset");
    transform(f, "/entry/instrument/detector/module_b/slow_pixel_direction", PIX, "m",
              "translation", y, none, "module_offset");
    H5Fclose(f);
    return path;
}

/* d by Bragg's law (1 A) at the lab position p (mm). */
static double bragg_d(const double p[3])
{
    const double r = sqrt(p[0] * p[0] + p[1] * p[1] + p[2] * p[2]);
    const double two_theta = acos(p[2] / r);
    return 1.0 / (2.0 * sin(0.5 * two_theta));
}

static void nxmx_modules(void **state)
{
    (void)state;
    sw_image fr[2];
    const char *path = two_module_master("nx_modules.h5", fr);
    sw_h5_reader *r = NULL;
    assert_int_equal(sw_h5_open(NULL, path, NULL, &r), SW_OK);
    sw_diffraction_module m[4];
    int32_t n = -1;
    assert_int_equal(sw_h5_read_modules(r, m, 4, &n), SW_OK);
    assert_int_equal(n, 2);
    assert_int_equal(m[0].x0, 0);
    assert_int_equal(m[0].y0, 0);
    assert_int_equal(m[0].width, 18);
    assert_int_equal(m[0].height, MH);
    assert_int_equal(m[0].orientation, 0);
    assert_int_equal(m[1].x0, 22);
    assert_int_equal(m[1].width, 18);
    assert_int_equal(m[1].orientation, 1);
    /* frame pixel (x, y) of module B at origin + x p fast + y p slow: the flat model's place
     * (centre of pixel x at (x + 0.5 - BX) p) shifted by SHIFT */
    assert_near(m[1].origin_mm[0], (0.5 - BX) * PIX * 1e3 + SHIFT * 1e3, 1e-9);
    assert_near(m[1].origin_mm[1], (0.5 - BY) * PIX * 1e3, 1e-9);
    assert_near(m[1].origin_mm[2], DIST * 1e3, 1e-9);
    assert_near(m[1].fast[0], 1.0, 1e-12);
    assert_near(m[1].slow[1], 1.0, 1e-12);
    assert_near(m[1].pixel_x_mm, 0.075, 1e-12);
    assert_int_equal(sw_h5_read_modules(r, NULL, 0, &n), SW_OK); /* the count alone */
    assert_int_equal(n, 2);
    assert_int_equal(sw_h5_read_modules(r, m, -1, &n), SW_EINVAL);
    sw_h5_close(r);

    /* layouts that do not hold together: no modules, the file still opens */
    for (int bad = 0; bad < 3; bad++) {
        const char *p2 = sw_test_path("nx_modules_bad.h5");
        assert_int_equal(sw_h5_write(NULL, p2, fr, 1, 0, SW_H5_NONE, NULL, 0.0), SW_OK);
        hid_t f = H5Fopen(p2, H5F_ACC_RDWR, H5P_DEFAULT);
        module_group(f, "/entry/instrument/detector/m1", 0, 0, MH, 20, 2);
        if (bad == 0) /* overlaps m1 */
            module_group(f, "/entry/instrument/detector/m2", 0, 19, MH, 18, 2);
        else if (bad == 1) /* beyond the frame */
            module_group(f, "/entry/instrument/detector/m2", 0, 22, MH, 19, 2);
        else /* three values */
            module_group(f, "/entry/instrument/detector/m2", 0, 22, MH, 18, 3);
        H5Fclose(f);
        assert_int_equal(sw_h5_open(NULL, p2, NULL, &r), SW_OK);
        assert_int_equal(sw_h5_read_modules(r, m, 4, &n), SW_OK);
        assert_int_equal(n, 0);
        sw_h5_close(r);
    }

    /* the command takes the modules as panels */
    const char *cli = getenv("SW_CLI");
    if (!cli || !*cli) {
        print_message("SW_CLI not set: the command's part of this test is skipped\n");
    } else {
        char cmd[8192], csv[4096];
        snprintf(csv, sizeof csv, "%s", sw_test_path("nx_modules.csv"));
        snprintf(cmd, sizeof cmd,
                 "'%s' --backend cpu find '%s' --min-spot-size 2 --sigma-b 3 --sigma-s 2 "
                 "--no-progress -o '%s' > /dev/null",
                 cli, path, csv);
        assert_int_equal(system(cmd), 0);
        FILE *f = fopen(csv, "r");
        assert_non_null(f);
        char line[1024];
        assert_non_null(fgets(line, sizeof line, f));
        assert_string_equal(line, "frame,x_px,y_px,x_var,y_var,intensity,npix,bbox_x0,bbox_x1,"
                                  "bbox_y0,bbox_y1,d_a,panel\n");
        int count[2] = {0, 0}, beside_gap = 0;
        while (fgets(line, sizeof line, f)) {
            long long frame, npix;
            double x, yy, xv, yv, in, d;
            int x0, x1, y0, y1, panel;
            assert_int_equal(sscanf(line, "%lld,%lf,%lf,%lf,%lf,%lf,%lld,%d,%d,%d,%d,%lf,%d",
                                    &frame, &x, &yy, &xv, &yv, &in, &npix, &x0, &x1, &y0, &y1, &d,
                                    &panel),
                             13);
            assert_false(x0 < 22 && x1 > 18); /* no spot on the gap or across it */
            assert_int_equal(panel, x < 18 ? 0 : 1);
            count[panel]++;
            beside_gap += (x1 == 18 || x0 == 22) && y0 >= 19;
            /* d from the module's placement: B's spots SHIFT further out than the flat model */
            const double p[3] = {(x - (BX - 0.5)) * 0.075 + (panel ? SHIFT * 1e3 : 0.0),
                                 (yy - (BY - 0.5)) * 0.075, DIST * 1e3};
            assert_near(d, bragg_d(p), 2e-4 * d);
        }
        fclose(f);
        assert_true(count[0] >= 2 && count[1] >= 2);
        assert_true(beside_gap >= 2); /* the spot across the gap became one on each side */
    }
    sw_image_free(&fr[0]);
    sw_image_free(&fr[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nxmx_geometry),
        cmocka_unit_test(nxmx_orientation),
        cmocka_unit_test(nxmx_modules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

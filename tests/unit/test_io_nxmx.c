/*
 * The NXmx geometry of an Eiger master (sw_h5_read_geometry): a master written by spotwave, its
 * geometry datasets then added with HDF5 directly as NXmx files have them (units attributes as
 * fixed and variable-length strings), read back exactly in spotwave's units; unusable fields
 * (unknown units, a vector where a scalar belongs, a negative distance) left out; the module
 * orientation from fast/slow_pixel_direction and their depends_on chain (translations, and a
 * 90-degree two-theta rotation), against the positions worked out by hand.
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <hdf5.h>
#include <math.h>
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nxmx_geometry),
        cmocka_unit_test(nxmx_orientation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * The NXmx geometry of an Eiger master (sw_h5_read_geometry): a master written by spotwave, its
 * geometry datasets then added with HDF5 directly as NXmx files have them (units attributes as
 * fixed and variable-length strings), read back exactly in spotwave's units; unusable fields
 * (unknown units, a vector where a scalar belongs, a negative distance) left out.
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nxmx_geometry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * The spot table as HDF5 (diffraction.h): a column per dataset, the same columns and names as
 * `spotwave find`'s CSV, for readers that load HDF5 (h5py, NeXus tools) rather than text. The
 * objects carry no creation times (HDF5 records them by default), so the same spots give the same
 * bytes: a run split over MPI ranks, or repeated, can be compared with cmp.
 */
#include "core/core_internal.h"
#include "spotwave/diffraction.h"

#include <hdf5.h>
#include <stdlib.h>
#include <string.h>

typedef struct writer {
    hid_t group;
    hid_t dcpl; /* dataset creation: no times */
    int ok;
} writer;

static void attr_string(hid_t obj, const char *name, const char *value)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(value) + 1);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    if (a >= 0) {
        H5Awrite(a, t, value);
        H5Aclose(a);
    }
    H5Sclose(sp);
    H5Tclose(t);
}

/* One column of n values of memory type mt (written as file type ft), with its units. */
static void column(writer *w, const char *name, hid_t ft, hid_t mt, const void *v, int64_t n,
                   const char *units)
{
    if (!w->ok)
        return;
    hsize_t dims[1] = {(hsize_t)n};
    hid_t sp = H5Screate_simple(1, dims, NULL);
    hid_t d = sp >= 0 ? H5Dcreate2(w->group, name, ft, sp, H5P_DEFAULT, w->dcpl, H5P_DEFAULT) : -1;
    if (d < 0 || (n > 0 && H5Dwrite(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0))
        w->ok = 0;
    if (d >= 0) {
        attr_string(d, "units", units);
        H5Dclose(d);
    }
    if (sp >= 0)
        H5Sclose(sp);
}

sw_status sw_diffraction_write_spots_h5(sw_context *ctx, const char *path, const sw_spot *spots,
                                        int64_t n, const sw_diffraction_table *t)
{
    if (!path || !t || n < 0 || (n > 0 && !spots))
        return sw_fail(ctx, SW_EINVAL, "sw_diffraction_write_spots_h5: NULL argument");
    if (t->geom) {
        sw_status st = sw_diffraction_geometry_check(ctx, t->geom);
        if (st != SW_OK)
            return st;
    }
    const size_t m = (size_t)(n > 0 ? n : 1);
    double *f = malloc(m * sizeof *f);
    int64_t *l = malloc(m * sizeof *l);
    int32_t *k = malloc(m * sizeof *k);
    if (!f || !l || !k) {
        free(f);
        free(l);
        free(k);
        return sw_fail(ctx, SW_ENOMEM, "sw_diffraction_write_spots_h5: out of memory");
    }
    H5E_auto2_t efunc = NULL;
    void *edata = NULL;
    const int saved = H5Eget_auto2(H5E_DEFAULT, &efunc, &edata) >= 0;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    writer w = {-1, H5Pcreate(H5P_DATASET_CREATE), 1};
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    const int times_off = w.dcpl >= 0 && gcpl >= 0 && H5Pset_obj_track_times(w.dcpl, 0) >= 0 &&
                          H5Pset_obj_track_times(gcpl, 0) >= 0;
    hid_t file = times_off ? H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT) : -1;
    if (file >= 0)
        w.group = H5Gcreate2(file, "spots", H5P_DEFAULT, gcpl, H5P_DEFAULT);
    if (gcpl >= 0)
        H5Pclose(gcpl);
    w.ok = file >= 0 && w.group >= 0;
    if (w.ok) {
        attr_string(w.group, "convention",
                    t->pixel_origin == 0.5 ? "dials: the centre of pixel (0,0) at (0.5,0.5)"
                                           : "spotwave: the centre of pixel (0,0) at (0,0)");
        hid_t sp = H5Screate(H5S_SCALAR);
        hid_t a = H5Acreate2(w.group, "pixel_origin", H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
        if (a >= 0) {
            H5Awrite(a, H5T_NATIVE_DOUBLE, &t->pixel_origin);
            H5Aclose(a);
        }
        a = H5Acreate2(w.group, "count", H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
        if (a >= 0) {
            H5Awrite(a, H5T_NATIVE_INT64, &n);
            H5Aclose(a);
        }
        H5Sclose(sp);
    }
#define F64(name, expr, units)                                                                     \
    do {                                                                                           \
        for (int64_t i = 0; i < n; i++)                                                            \
            f[i] = (expr);                                                                         \
        column(&w, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, f, n, units);                          \
    } while (0)
#define I64(name, expr, units)                                                                     \
    do {                                                                                           \
        for (int64_t i = 0; i < n; i++)                                                            \
            l[i] = (expr);                                                                         \
        column(&w, name, H5T_STD_I64LE, H5T_NATIVE_INT64, l, n, units);                            \
    } while (0)
#define I32(name, expr, units)                                                                     \
    do {                                                                                           \
        for (int64_t i = 0; i < n; i++)                                                            \
            k[i] = (expr);                                                                         \
        column(&w, name, H5T_STD_I32LE, H5T_NATIVE_INT32, k, n, units);                            \
    } while (0)
    if (t->three_d)
        F64("frame", spots[i].z, "frame (intensity-weighted)");
    else
        I64("frame", spots[i].z0, "frame");
    F64("x_px", spots[i].x + t->pixel_origin, "pixel");
    F64("y_px", spots[i].y + t->pixel_origin, "pixel");
    F64("x_var", spots[i].x_var, "pixel^2");
    F64("y_var", spots[i].y_var, "pixel^2");
    F64("intensity", spots[i].intensity, "counts");
    I64("npix", spots[i].npix, "pixels");
    I32("bbox_x0", spots[i].x0, "pixel index");
    I32("bbox_x1", spots[i].x1, "pixel index (exclusive)");
    I32("bbox_y0", spots[i].y0, "pixel index");
    I32("bbox_y1", spots[i].y1, "pixel index (exclusive)");
    if (t->three_d) {
        F64("z_var", spots[i].z_var, "frame^2");
        I64("bbox_z0", spots[i].z0, "frame");
        I64("bbox_z1", spots[i].z1, "frame (exclusive)");
    }
    if (t->geom)
        F64("d_a",
            sw_diffraction_d_at(t->geom, t->panels, t->width, t->height, spots[i].x, spots[i].y),
            "angstrom");
    if (t->panels)
        I32("panel",
            sw_diffraction_panel_at(t->panels, t->width, t->height, spots[i].x, spots[i].y),
            "module (row by row from 0, or as the file lists them; -1 none)");
    I64("parent", spots[i].parent,
        "deblending: 0, or the 1-based row of the first spot split from the same blend");
#undef F64
#undef I64
#undef I32
    if (w.group >= 0)
        H5Gclose(w.group);
    if (w.dcpl >= 0)
        H5Pclose(w.dcpl);
    if (file >= 0 && H5Fclose(file) < 0)
        w.ok = 0;
    if (saved)
        H5Eset_auto2(H5E_DEFAULT, efunc, edata);
    free(f);
    free(l);
    free(k);
    if (!w.ok)
        return sw_fail(ctx, SW_EIO, "cannot write the spot table '%s' as HDF5", path);
    return SW_OK;
}

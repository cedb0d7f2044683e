/*
 * Writes the binary seed corpora of the HDF5 fuzz targets (tests/fuzz/README.md): every layout
 * spotwave's writer makes, small.
 *   corpus/h5/          one file each: compression none / deflate / bitshuffle-LZ4 (when the
 *                       plugin loads) x u8 / u16 / u32, one or several blocks, with and without
 *                       a pixel mask and an overload
 *   corpus/h5_linked/   a master and its data files, packed as fuzz_common.h's fuzz_split reads
 *   corpus/bitshuffle/  chunks from spotwave's encoder with fuzz_bitshuffle's 3-byte prefix
 *   corpus/h5_layout/   the walk's message for a file of corpus/h5, then that file
 *   modules_*           (h5, h5_layout) an NXmx master of two NXdetector_module groups, one
 *                       placed by its pixel directions (sw_h5_read_modules)
 * Usage: make_seeds <corpus folder> [modules] (modules: only the modules_* seeds). Built with the
 * fuzz targets (-DSW_FUZZ=ON); the seeds are kept in git, so this only needs running when the
 * writer's layouts change.
 */
#define _POSIX_C_SOURCE 200809L

#include "spotwave/spotwave.h"

#include "io/bitshuffle.h"
#include "io/hdf5_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static unsigned char *slurp(const char *p, size_t *n)
{
    FILE *f = fopen(p, "rb");
    if (!f)
        exit(1);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    unsigned char *b = malloc(*n + 1);
    if (!b || fread(b, 1, *n, f) != *n)
        exit(1);
    fclose(f);
    return b;
}

static void spit(const char *p, const void *b, size_t n)
{
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(b, 1, n, f) != n || fclose(f) != 0)
        exit(1);
}

static void put_le32(FILE *f, uint32_t v)
{
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    fwrite(b, 1, 4, f);
}

/* A scalar or 1-D float64 dataset (created with its groups) with string attributes (name,
 * value pairs, NULL-terminated). */
static int put_f64(hid_t f, const char *path, const double *v, int n, const char *const *attrs)
{
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hsize_t dims[1] = {(hsize_t)n};
    hid_t sp = n == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, dims, NULL);
    hid_t d = H5Dcreate2(f, path, H5T_IEEE_F64LE, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    int ok = d >= 0 && H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0;
    for (int i = 0; ok && attrs && attrs[i]; i += 2) {
        hid_t st = H5Tcopy(H5T_C_S1), as = H5Screate(H5S_SCALAR);
        H5Tset_size(st, strlen(attrs[i + 1]));
        hid_t a = H5Acreate2(d, attrs[i], st, as, H5P_DEFAULT, H5P_DEFAULT);
        ok = a >= 0 && H5Awrite(a, st, attrs[i + 1]) >= 0;
        if (a >= 0)
            H5Aclose(a);
        H5Sclose(as);
        H5Tclose(st);
    }
    if (d >= 0)
        H5Dclose(d);
    H5Sclose(sp);
    H5Pclose(lcpl);
    return ok ? 0 : -1;
}

/* An NXdetector_module group with data_origin [y0, x0] and data_size [h, w] (int32). */
static int put_module(hid_t f, const char *path, int y0, int x0, int h, int w)
{
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t g = H5Gcreate2(f, path, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    H5Pclose(lcpl);
    if (g < 0)
        return -1;
    hid_t st = H5Tcopy(H5T_C_S1), as = H5Screate(H5S_SCALAR);
    H5Tset_size(st, strlen("NXdetector_module"));
    hid_t a = H5Acreate2(g, "NX_class", st, as, H5P_DEFAULT, H5P_DEFAULT);
    int ok = a >= 0 && H5Awrite(a, st, "NXdetector_module") >= 0;
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(as);
    H5Tclose(st);
    const int v[2][2] = {{y0, x0}, {h, w}};
    hsize_t dims[1] = {2};
    hid_t sp = H5Screate_simple(1, dims, NULL);
    for (int k = 0; ok && k < 2; k++) {
        hid_t d = H5Dcreate2(g, k ? "data_size" : "data_origin", H5T_STD_I32LE, sp, H5P_DEFAULT,
                             H5P_DEFAULT, H5P_DEFAULT);
        ok = d >= 0 && H5Dwrite(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v[k]) >= 0;
        if (d >= 0)
            H5Dclose(d);
    }
    H5Sclose(sp);
    H5Gclose(g);
    return ok ? 0 : -1;
}

/* corpus/h5/modules_u16.h5 (a master of two modules, one placed by its pixel directions) and
 * its walk's message with it in corpus/h5_layout/modules_u16.bin. */
static int modules_seed(const char *root)
{
    enum { W = 12, H = 5 };
    sw_image fr[2];
    for (int k = 0; k < 2; k++) {
        if (sw_image_alloc(NULL, W, H, SW_PIX_U16, &fr[k]) != SW_OK)
            return -1;
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                ((uint16_t *)sw_image_row(&fr[k], y))[x] = (uint16_t)((x + 2 * y + k) % 5);
    }
    char path[1200], lay[1200];
    snprintf(path, sizeof path, "%s/h5/modules_u16.h5", root);
    sw_status st = sw_h5_write(NULL, path, fr, 2, 0, SW_H5_DEFLATE, NULL, 0.0);
    sw_image_free(&fr[0]);
    sw_image_free(&fr[1]);
    if (st != SW_OK)
        return -1;
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0)
        return -1;
    const double one = 1.0, dist = 0.05, bx = 6.0, by = 2.5, pix = 7.5e-5, zero = 0.0;
    const double corner[3] = {0.0005, -0.0002, 0.05}, xv[3] = {1, 0, 0}, yv[3] = {0, 1, 0};
    const char *const m[] = {"units", "m", NULL};
    const char *const a[] = {"units", "angstrom", NULL};
    const char *const px[] = {"units", "pixel", NULL};
    int bad = put_f64(f, "/entry/instrument/beam/incident_wavelength", &one, 1, a) ||
              put_f64(f, "/entry/instrument/detector/detector_distance", &dist, 1, m) ||
              put_f64(f, "/entry/instrument/detector/beam_center_x", &bx, 1, px) ||
              put_f64(f, "/entry/instrument/detector/beam_center_y", &by, 1, px) ||
              put_f64(f, "/entry/instrument/detector/x_pixel_size", &pix, 1, m) ||
              put_f64(f, "/entry/instrument/detector/y_pixel_size", &pix, 1, m) ||
              put_module(f, "/entry/instrument/detector/module_a", 0, 0, H, 5) ||
              put_module(f, "/entry/instrument/detector/module_b", 0, 7, H, 5);
    const char *const off[] = {"transformation_type", "translation", "depends_on", ".", NULL};
    const char *const dir[] = {"transformation_type", "translation", "depends_on", "module_offset",
                               NULL};
    bad = bad || put_f64(f, "/entry/instrument/detector/module_b/module_offset", &zero, 1, off) ||
          put_f64(f, "/entry/instrument/detector/module_b/fast_pixel_direction", &pix, 1, dir) ||
          put_f64(f, "/entry/instrument/detector/module_b/slow_pixel_direction", &pix, 1, dir);
    /* the vector and offset attributes */
    const char *const objs[3] = {"/entry/instrument/detector/module_b/module_offset",
                                 "/entry/instrument/detector/module_b/fast_pixel_direction",
                                 "/entry/instrument/detector/module_b/slow_pixel_direction"};
    for (int i = 0; !bad && i < 3; i++) {
        hid_t d = H5Dopen2(f, objs[i], H5P_DEFAULT);
        hsize_t n3 = 3;
        hid_t sp = H5Screate_simple(1, &n3, NULL);
        for (int k = 0; k < (i == 0 ? 2 : 1); k++) {
            hid_t at = H5Acreate2(d, k ? "offset" : "vector", H5T_IEEE_F64LE, sp, H5P_DEFAULT,
                                  H5P_DEFAULT);
            const double *v = k ? corner : i == 2 ? yv : xv;
            bad |= at < 0 || H5Awrite(at, H5T_NATIVE_DOUBLE, v) < 0;
            if (at >= 0)
                H5Aclose(at);
        }
        H5Sclose(sp);
        H5Dclose(d);
    }
    H5Fclose(f);
    if (bad)
        return -1;
    h5_walk_opts wo = {NULL, NULL, 0};
    h5_layout l;
    h5_walk(path, &wo, &l);
    if (l.st != SW_OK || l.nmodules != 2 || !l.modules[1].orientation) {
        fprintf(stderr, "make_seeds: the modules seed does not read back (%s)\n", l.msg);
        h5_layout_free(&l);
        return -1;
    }
    size_t mn = 0, fn = 0;
    uint8_t *msg = h5_layout_pack(&l, &mn);
    h5_layout_free(&l);
    unsigned char *fb = slurp(path, &fn);
    snprintf(lay, sizeof lay, "%s/h5_layout/modules_u16.bin", root);
    FILE *o = msg ? fopen(lay, "wb") : NULL;
    if (!o)
        return -1;
    put_le32(o, (uint32_t)mn);
    fwrite(msg, 1, mn, o);
    fwrite(fb, 1, fn, o);
    fclose(o);
    free(msg);
    free(fb);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2 && !(argc == 3 && strcmp(argv[2], "modules") == 0)) {
        fprintf(stderr, "usage: make_seeds <corpus folder> [modules]\n");
        return 2;
    }
    const char *root = argv[1];
    if (argc == 3) {
        if (modules_seed(root) != 0)
            return 1;
        printf("make_seeds: the modules seeds written under %s\n", root);
        return 0;
    }
    char dir[1024], path[1200], tmp[1200];
    const char *sub[3] = {"h5", "h5_linked", "bitshuffle"};
    for (int i = 0; i < 3; i++) {
        snprintf(dir, sizeof dir, "%s/%s", root, sub[i]);
        mkdir(dir, 0755);
    }
    char work[] = "/tmp/swseeds-XXXXXX";
    if (!mkdtemp(work))
        return 1;
    const sw_pixel_type types[3] = {SW_PIX_U8, SW_PIX_U16, SW_PIX_U32};
    const char *tname[3] = {"u8", "u16", "u32"};
    const sw_h5_compression comps[3] = {SW_H5_NONE, SW_H5_DEFLATE, SW_H5_BSLZ4};
    const char *cname[3] = {"none", "deflate", "bslz4"};
    const int bs = sw_h5_bitshuffle_available();
    int written = 0;
    for (int c = 0; c < 3; c++) {
        if (comps[c] == SW_H5_BSLZ4 && !bs) {
            fprintf(stderr, "make_seeds: no bitshuffle plugin: bslz4 seeds skipped\n");
            continue;
        }
        for (int t = 0; t < 3; t++)
            for (int v = 0; v < 2; v++) {
                /* v 0: 3 frames in one block; v 1: 3 frames in blocks of 2, mask, overload */
                const int w = 9, h = 5, n = 3;
                sw_image fr[3];
                for (int k = 0; k < n; k++) {
                    if (sw_image_alloc(NULL, w, h, types[t], &fr[k]) != SW_OK)
                        return 1;
                    const size_t ps = sw_pixel_size(types[t]);
                    for (int y = 0; y < h; y++)
                        for (int x = 0; x < w; x++) {
                            uint32_t val = (uint32_t)((x * 3 + y * 5 + k) % 7) +
                                           (x == 4 && y == 2 ? 200u : 0u);
                            uint8_t *p = (uint8_t *)sw_image_row(&fr[k], y) + (size_t)x * ps;
                            if (ps == 1)
                                *p = (uint8_t)val;
                            else if (ps == 2)
                                *(uint16_t *)(void *)p = (uint16_t)val;
                            else
                                *(uint32_t *)(void *)p = val;
                        }
                }
                uint8_t valid[45];
                for (int i = 0; i < w * h; i++)
                    valid[i] = i % 11 != 3;
                for (int linked = 0; linked < 2; linked++) {
                    snprintf(tmp, sizeof tmp, "%s/f_master.h5", work);
                    sw_status st = (linked ? sw_h5_write_linked : sw_h5_write)(
                        NULL, tmp, fr, n, v ? 2 : 0, comps[c], v ? valid : NULL, v ? 4000.0 : 0.0);
                    if (st != SW_OK) {
                        fprintf(stderr, "make_seeds: %s\n", sw_context_error(NULL));
                        return 1;
                    }
                    size_t mn;
                    unsigned char *m = slurp(tmp, &mn);
                    if (!linked) {
                        snprintf(path, sizeof path, "%s/h5/%s_%s_%s.h5", root, cname[c], tname[t],
                                 v ? "blocks_mask" : "one_block");
                        spit(path, m, mn);
                    } else {
                        snprintf(path, sizeof path, "%s/h5_linked/%s_%s_%s.bin", root, cname[c],
                                 tname[t], v ? "blocks_mask" : "one_block");
                        FILE *f = fopen(path, "wb");
                        if (!f)
                            return 1;
                        /* master, data 1, data 2 (each but the last length-prefixed), data 3 */
                        put_le32(f, (uint32_t)mn);
                        fwrite(m, 1, mn, f);
                        for (int b = 1; b <= 3; b++) {
                            size_t dn = 0;
                            unsigned char *d = NULL;
                            snprintf(tmp, sizeof tmp, "%s/f_data_%06d.h5", work, b);
                            if (access(tmp, F_OK) == 0) {
                                d = slurp(tmp, &dn);
                                unlink(tmp);
                            }
                            if (b < 3)
                                put_le32(f, (uint32_t)dn);
                            if (dn)
                                fwrite(d, 1, dn, f);
                            free(d);
                        }
                        fclose(f);
                    }
                    free(m);
                    snprintf(tmp, sizeof tmp, "%s/f_master.h5", work);
                    unlink(tmp);
                    written++;
                }
                for (int k = 0; k < n; k++)
                    sw_image_free(&fr[k]);
            }
    }
    /* chunks for the decoder alone: sizes with whole blocks, a short block and a tail */
    const size_t counts[4] = {1, 37, 700, 4103}, ess[3] = {1, 2, 4};
    for (int ci = 0; ci < 4; ci++)
        for (int ei = 0; ei < 3; ei++) {
            size_t es = ess[ei], size = counts[ci] * es;
            uint8_t *in = malloc(size);
            size_t cap = sw_bshuf_lz4_bound(size, es, 0);
            uint8_t *enc = malloc(cap + 3);
            if (!in || !enc)
                return 1;
            for (size_t i = 0; i < size; i++)
                in[i] = (uint8_t)(i % 13 == 0 ? i * 7 : i % 3);
            enc[0] = (uint8_t)(ei == 0 ? 0 : ei == 1 ? 1 : 2);
            enc[1] = (uint8_t)(counts[ci] & 0xFF);
            enc[2] = (uint8_t)(counts[ci] >> 8);
            size_t m = sw_bshuf_encode_lz4(in, size, enc + 3, cap, es, 0);
            if (m == 0)
                return 1;
            snprintf(path, sizeof path, "%s/bitshuffle/lz4_%zux%zu.bin", root, counts[ci], es);
            spit(path, enc, m + 3);
            free(in);
            free(enc);
        }
    /* the walk's messages for the single-file seeds, each with its file (fuzz_h5_layout) */
    snprintf(dir, sizeof dir, "%s/h5_layout", root);
    mkdir(dir, 0755);
    int layouts = 0;
    for (int c = 0; c < 3; c++)
        for (int t = 0; t < 3; t++) {
            snprintf(path, sizeof path, "%s/h5/%s_%s_blocks_mask.h5", root, cname[c], tname[t]);
            if (access(path, F_OK) != 0)
                continue;
            h5_walk_opts wo = {NULL, NULL, 0};
            h5_layout l;
            h5_walk(path, &wo, &l);
            size_t mn = 0, fn = 0;
            uint8_t *m = h5_layout_pack(&l, &mn);
            h5_layout_free(&l);
            unsigned char *fb = slurp(path, &fn);
            if (!m)
                return 1;
            snprintf(tmp, sizeof tmp, "%s/h5_layout/%s_%s.bin", root, cname[c], tname[t]);
            FILE *f = fopen(tmp, "wb");
            if (!f)
                return 1;
            put_le32(f, (uint32_t)mn);
            fwrite(m, 1, mn, f);
            fwrite(fb, 1, fn, f);
            fclose(f);
            free(m);
            free(fb);
            layouts++;
        }
    rmdir(work);
    if (modules_seed(root) != 0)
        return 1;
    printf("make_seeds: %d HDF5 seeds, 12 chunks and %d layouts written under %s\n", written,
           layouts, root);
    return 0;
}

/*
 * The checks every HDF5 fuzz target makes on a file set: open (the walk in its child, a short
 * time limit), then read frames into padded images and the pixel mask.
 * Invariants: a failed open leaves *out NULL with one of the statuses io.h lists for files; an
 * open file has a consistent shape and modules inside its frames; every read (bitshuffle/LZ4
 * blocks on two threads) is SW_OK or SW_EFORMAT and writes nothing outside
 * the image's own pixels (the row padding keeps its sentinel); frames out of range are
 * SW_EINVAL; the mask is SW_EFORMAT only when absent or unusable.
 */
#ifndef SW_FUZZ_H5_H
#define SW_FUZZ_H5_H

#include "fuzz_common.h"
#include "spotwave/spotwave.h"

#define FUZZ_PAD 24 /* bytes of sentinel after each row */

static void fuzz_h5_check(const char *path)
{
    sw_h5_options o;
    sw_h5_options_default(&o);
    o.timeout_s = 5.0;
    o.threads = 2;                        /* bitshuffle/LZ4 blocks decoded on two threads */
    sw_h5_reader *r = (sw_h5_reader *)&o; /* not NULL: open must reset it */
    sw_status st = sw_h5_open_ex(NULL, path, &o, &r);
    if (st != SW_OK) {
        if (r != NULL)
            abort();
        if (st != SW_EFORMAT && st != SW_EIO && st != SW_EUNSUPPORTED && st != SW_ENOMEM)
            abort();
        return;
    }
    sw_h5_info in;
    if (sw_h5_get_info(r, &in) != SW_OK || in.frames < 1 || in.width < 1 || in.height < 1 ||
        in.width > SW_IMAGE_MAX_DIM || in.height > SW_IMAGE_MAX_DIM || in.blocks < 1 ||
        (in.type != SW_PIX_U8 && in.type != SW_PIX_U16 && in.type != SW_PIX_U32) ||
        !(in.overload >= 0.0))
        abort();
    /* the modules: inside the frame, apart, orientations of unit axes */
    int32_t nmod = -1;
    sw_diffraction_module mods[8];
    if (sw_h5_read_modules(r, mods, 8, &nmod) != SW_OK || nmod < 0 || nmod > 1024)
        abort();
    for (int32_t m = 0; m < nmod && m < 8; m++) {
        const sw_diffraction_module *md = &mods[m];
        if (md->x0 < 0 || md->y0 < 0 || md->width < 1 || md->height < 1 ||
            (int64_t)md->x0 + md->width > in.width || (int64_t)md->y0 + md->height > in.height)
            abort();
        if (md->orientation && !(md->pixel_x_mm > 0.0 && md->pixel_y_mm > 0.0))
            abort();
    }
    const size_t ps = sw_pixel_size(in.type), row = (size_t)in.width * ps;
    /* frames beyond what a fuzzer's memory allows are left unread */
    if ((uint64_t)row * (uint64_t)in.height <= ((uint64_t)64 << 20)) {
        sw_image img;
        memset(&img, 0, sizeof img);
        img.width = in.width;
        img.height = in.height;
        img.type = in.type;
        img.stride = row + FUZZ_PAD;
        img.memory = SW_MEM_HOST;
        uint8_t *buf = malloc(img.stride * (size_t)in.height);
        if (!buf)
            abort();
        img.data = buf;
        const int64_t pick[5] = {0, in.frames - 1, in.frames / 2, 1, in.frames - 2};
        for (int i = 0; i < 5; i++) {
            if (pick[i] < 0 || pick[i] >= in.frames)
                continue;
            memset(buf, 0xA7, img.stride * (size_t)in.height);
            sw_status rs = sw_h5_read_frame(r, pick[i], &img);
            if (rs != SW_OK && rs != SW_EFORMAT)
                abort();
            for (int32_t y = 0; y < in.height; y++)
                for (size_t k = row; k < img.stride; k++)
                    if (buf[(size_t)y * img.stride + k] != 0xA7)
                        abort(); /* written outside the frame */
            if (rs != SW_OK && sw_h5_reader_error(r)[0] == '\0')
                abort();
        }
        if (sw_h5_read_frame(r, in.frames, &img) != SW_EINVAL)
            abort();
        free(buf);
        uint8_t *valid = malloc((size_t)in.width * (size_t)in.height);
        if (!valid)
            abort();
        sw_status ms = sw_h5_read_pixel_mask(r, valid);
        if (ms != SW_OK && ms != SW_EFORMAT)
            abort();
        if (ms == SW_OK) {
            if (!in.has_pixel_mask)
                abort();
            for (size_t i = 0; i < (size_t)in.width * (size_t)in.height; i++)
                if (valid[i] > 1)
                    abort();
        }
        free(valid);
    }
    sw_h5_close(r);
}

#endif

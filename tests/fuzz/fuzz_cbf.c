/*
 * libFuzzer target: CBF from memory (sw_cbf_read_memory and sw_cbf_read_frames_memory: CBFlib in
 * a child process, then the parent's checks of the child's message and the conversion to images
 * and a mask), and the Pilatus mini-header parser on the same bytes. A successful read gives a
 * fully backed image, a mask of its size or none, and a geometry whose fields are finite (and
 * positive where they are lengths); a failed one leaves everything zeroed. CBFlib's own crashes end
 * the child, not this process (its coverage is not seen here: the library is not instrumented and
 * runs in the child).
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "spotwave/spotwave.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_geometry(const sw_diffraction_geometry *g)
{
    if ((g->have & SW_DG_WAVELENGTH) && !(isfinite(g->wavelength_a) && g->wavelength_a > 0))
        abort();
    if ((g->have & SW_DG_DISTANCE) && !(isfinite(g->distance_mm) && g->distance_mm > 0))
        abort();
    if ((g->have & SW_DG_PIXEL) && !(g->pixel_x_mm > 0 && g->pixel_y_mm > 0 &&
                                     isfinite(g->pixel_x_mm) && isfinite(g->pixel_y_mm)))
        abort();
    if ((g->have & SW_DG_BEAM) && !(isfinite(g->beam_x_px) && isfinite(g->beam_y_px)))
        abort();
    if ((g->have & SW_DG_OVERLOAD) && !(isfinite(g->overload) && g->overload > 0))
        abort();
    if ((g->have & SW_DG_EXPOSURE) && !(isfinite(g->exposure_s) && g->exposure_s > 0))
        abort();
    if (g->have & SW_DG_ORIENTATION)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sw_diffraction_geometry g;
    sw_cbf_parse_header((const char *)data, size, &g);
    check_geometry(&g);

    sw_image img;
    uint8_t *valid = (uint8_t *)1;
    sw_status st = sw_cbf_read_memory(NULL, data, size, &img, &valid, &g);
    if (st == SW_OK) {
        size_t row = (size_t)img.width * sw_pixel_size(img.type);
        unsigned sum = 0;
        for (int32_t y = 0; y < img.height; y++) {
            const uint8_t *p = sw_image_row(&img, y);
            for (size_t i = 0; i < row; i++)
                sum += p[i];
        }
        if (valid) /* the mask covers the image */
            for (size_t i = 0; i < (size_t)img.width * (size_t)img.height; i++)
                sum += valid[i];
        if (img.width <= 0 || img.height <= 0 || (sum == 1u && img.data == NULL))
            abort();
        check_geometry(&g);
        free(valid);
        sw_image_free(&img);
    } else if (img.data != NULL || img.width != 0 || valid != NULL || g.have != 0) {
        abort(); /* failures must leave the outputs zeroed */
    }

    /* every frame: one size and type, the mask of that size; a failure zeroes everything; a
     * file sw_cbf_read took is one frame of the same pixels */
    sw_frames fr;
    valid = (uint8_t *)1;
    sw_status sf = sw_cbf_read_frames_memory(NULL, data, size, &fr, &valid, &g);
    if (sf == SW_OK) {
        if (fr.count < 1 || !fr.frames)
            abort();
        unsigned sum = 0;
        for (int32_t k = 0; k < fr.count; k++) {
            const sw_image *f = &fr.frames[k];
            if (f->width != fr.frames[0].width || f->height != fr.frames[0].height ||
                f->type != fr.frames[0].type || !f->data)
                abort();
            for (int32_t y = 0; y < f->height; y++)
                sum += ((const uint8_t *)sw_image_row(f, y))[f->width * sw_pixel_size(f->type) - 1];
        }
        if (valid)
            for (size_t i = 0; i < (size_t)fr.frames[0].width * (size_t)fr.frames[0].height; i++)
                sum += valid[i] > 1;
        if ((st == SW_OK) != (fr.count == 1) || sum == 0xFFFFFFFFu)
            abort();
        check_geometry(&g);
        free(valid);
        sw_frames_free(&fr);
    } else if (fr.count != 0 || fr.frames != NULL || valid != NULL || g.have != 0 ||
               (st == SW_OK)) {
        abort();
    }
    return 0;
}

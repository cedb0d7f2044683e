/*
 * libFuzzer target: FITS parsing from memory (our structural pre-scan, then cfitsio). Any input
 * must give SW_OK with valid frames or an error with *out zeroed; nothing may leak or crash.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "spotwave/spotwave.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sw_frames fr;
    sw_status st = sw_fits_read_memory(NULL, data, size, &fr);
    if (st == SW_OK) {
        if (fr.count < 1 || !fr.frames)
            abort();
        unsigned sum = 0;
        for (int32_t k = 0; k < fr.count; k++) {
            const sw_image *img = &fr.frames[k];
            size_t row = (size_t)img->width * sw_pixel_size(img->type);
            for (int32_t y = 0; y < img->height; y++) {
                const uint8_t *p = sw_image_row(img, y);
                for (size_t i = 0; i < row; i++)
                    sum += p[i];
            }
        }
        if (sum == 1u && fr.frames[0].data == NULL)
            abort();
        sw_frames_free(&fr);
    } else if (fr.frames != NULL || fr.count != 0) {
        abort(); /* failures must leave *out zeroed */
    }
    return 0;
}

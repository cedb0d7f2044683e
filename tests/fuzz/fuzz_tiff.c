/*
 * libFuzzer target: TIFF from memory (sw_tiff_read_memory: libtiff in this process, behind
 * spotwave's checks of sizes, types and page agreement). A successful read gives count >= 1
 * fully backed frames of one size and type; a failed one leaves *out zeroed.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "spotwave/spotwave.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sw_frames fr;
    sw_status st = sw_tiff_read_memory(NULL, data, size, &fr);
    if (st == SW_OK) {
        if (fr.count < 1 || !fr.frames)
            abort();
        unsigned sum = 0;
        for (int32_t k = 0; k < fr.count; k++) {
            const sw_image *img = &fr.frames[k];
            if (img->width != fr.frames[0].width || img->height != fr.frames[0].height ||
                img->type != fr.frames[0].type)
                abort();
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
        abort();
    }
    return 0;
}

/*
 * libFuzzer target: PGM (P5) parsing from memory. Any input must give SW_OK with a valid image
 * or an error with *out zeroed; nothing may leak or crash.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "spotwave/spotwave.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sw_image img;
    sw_status st = sw_pgm_read_memory(NULL, data, size, &img);
    if (st == SW_OK) {
        /* touch every pixel: the image must be fully backed */
        size_t row = (size_t)img.width * sw_pixel_size(img.type);
        unsigned sum = 0;
        for (int32_t y = 0; y < img.height; y++) {
            const uint8_t *p = sw_image_row(&img, y);
            for (size_t i = 0; i < row; i++)
                sum += p[i];
        }
        if (img.width <= 0 || img.height <= 0 || (sum == 1u && img.data == NULL))
            abort();
        sw_image_free(&img);
    } else if (img.data != NULL || img.width != 0) {
        abort(); /* failures must leave *out zeroed */
    }
    return 0;
}

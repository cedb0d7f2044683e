/*
 * libFuzzer target: the star catalogue readers, detector positions (sw_stars_read_csv) and sky
 * positions projected through a camera (sw_stars_read_sky_csv), on the same file. Invariants: a
 * failure leaves the list zeroed; a success has count >= 0 arrays of finite positions and
 * finite non-negative fluxes (the sky reader: inside the image and its margin).
 */
#include "fuzz_common.h"
#include "spotwave/spotwave.h"

#include <math.h>

static void check(sw_status st, sw_stars *s, int sky, const sw_camera *cam, double margin)
{
    if (st != SW_OK) {
        if (s->count != 0 || s->x || s->y || s->flux || s->mag)
            abort();
        if (st != SW_EFORMAT && st != SW_EIO && st != SW_ENOMEM)
            abort();
        return;
    }
    if (s->count < 0 || (s->count > 0 && (!s->x || !s->y || !s->flux || !s->mag)))
        abort();
    for (int64_t i = 0; i < s->count; i++) {
        if (!isfinite(s->x[i]) || !isfinite(s->y[i]) || !isfinite(s->flux[i]) || s->flux[i] < 0)
            abort();
        if (sky && (s->x[i] < -0.5 - margin - 1e-6 || s->x[i] > cam->width - 0.5 + margin ||
                    s->y[i] < -0.5 - margin - 1e-6 || s->y[i] > cam->height - 0.5 + margin))
            abort();
    }
    sw_stars_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[1024];
    fuzz_file("stars.csv", data, size, path, sizeof path);
    sw_stars s;
    memset(&s, 0x5A, sizeof s);
    check(sw_stars_read_csv(NULL, path, 1e6, 0.0, &s), &s, 0, NULL, 0.0);
    const sw_camera cam = {83.8, -5.4, 30.0, 50.0, 5.5, 640, 480};
    memset(&s, 0x5A, sizeof s);
    check(sw_stars_read_sky_csv(NULL, path, &cam, 1e6, 0.0, 8.0, &s), &s, 1, &cam, 8.0);
    return 0;
}

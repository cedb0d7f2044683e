/*
 * spotwave from C: simulate a star field with a detector, find its spots, print what was found.
 *
 *   cc example.c $(pkg-config --cflags --libs spotwave) -o example && ./example
 *
 * or with CMake (examples/c/CMakeLists.txt): find_package(spotwave) and link spotwave::spotwave.
 * Every function returns an sw_status; sw_context_error() says what went wrong in words.
 */
#include <spotwave/spotwave.h>

#include <stdio.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((call) != SW_OK) {                                                                     \
            fprintf(stderr, "example: %s\n", sw_context_error(ctx));                               \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(void)
{
    sw_context *ctx;
    if (sw_context_create(NULL, &ctx) != SW_OK) /* AUTO: the GPU if usable, else the CPU */
        return 1;
    printf("spotwave %s: %s\n", sw_version(), sw_context_backend_reason(ctx));

    /* 200 random stars of magnitude 8..12 on a 512 x 512 frame (seed 7); magnitude 0 gives 1e8 e-.
     */
    sw_stars stars;
    CHECK(sw_stars_random(ctx, 200, 512, 512, 8.0, 12.0, 1e8, 0.0, 7, &stars));
    sw_starsim_params sp;
    sw_starsim_params_default(&sp);
    sp.width = sp.height = 512;
    sp.sigma = 1.5;
    sp.roi_side = 15;
    sp.max_stars = stars.count;
    sw_starsim *sim;
    CHECK(sw_starsim_create(ctx, &sp, &sim));
    sw_image electrons, adu;
    CHECK(sw_image_alloc(ctx, 512, 512, SW_PIX_F32, &electrons));
    CHECK(sw_image_alloc(ctx, 512, 512, SW_PIX_U16, &adu));
    CHECK(sw_starsim_run(sim, &stars, &electrons));

    /* A CCD: 20 e- of sky, 5 e- read noise, 2 e-/ADU, 100 ADU bias, Poisson noise. */
    sw_detector det;
    sw_detector_default(&det);
    det.sky_e = 20.0;
    det.read_noise_e = 5.0;
    det.gain_e_per_adu = 2.0;
    det.bias_adu = 100.0;
    det.out_type = SW_PIX_U16;
    CHECK(sw_detector_apply(ctx, &det, &electrons, &adu));

    /* The DIALS dispersion threshold; gain in the threshold's sense = variance / mean of the
     * background in ADU (here (20 + 25/2) / 2 e-/ADU over a mean of 10 + 100 ADU). */
    sw_find_params fp;
    sw_find_params_default(&fp, 512, 512, SW_PIX_U16);
    fp.gain = ((20.0 + 25.0) / 4.0) / (20.0 / 2.0 + 100.0);
    sw_find_plan *find;
    CHECK(sw_find_create(ctx, &fp, &find));
    sw_spot_list spots = {0};
    CHECK(sw_find_run(find, &adu, 0, &spots, NULL, NULL));
    printf("%lld stars simulated, %lld spots found; the first at (%.2f, %.2f) px\n",
           (long long)stars.count, (long long)spots.count, spots.count ? spots.spots[0].x : 0.0,
           spots.count ? spots.spots[0].y : 0.0);

    sw_spot_list_free(&spots);
    sw_find_destroy(find);
    sw_image_free(&adu);
    sw_image_free(&electrons);
    sw_starsim_destroy(sim);
    sw_stars_free(&stars);
    sw_context_destroy(ctx);
    return 0;
}

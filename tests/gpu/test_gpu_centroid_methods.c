/*
 * The GPU twin of the centroid stage's generic path (centroid_cuda.cu method_kernel) against the
 * CPU's (centroid.c), one plan per backend from the same parameters: every method (cog with error
 * bars, wcog fixed and re-centred, local, brightest, correlation, quadcell; cog and quadcell both
 * in one pass from the frame and, without a detector model or with a FRACTION threshold, from
 * the region in shared memory), u8 / u16 / f32 frames, a window, a mask, a saturation level, the
 * validity checks, a batch of frames, the copy, device and mapped paths into host and pinned
 * results, and on the device path every group size of the GPU kernel (SPOTWAVE_CENTROID_LANES =
 * 1 ... 32 lanes per lenslet: the same code with its sums reduced over other lanes, in another
 * order), on 18-19 px and on 4-5 px regions (lanes with no pixel; BRIGHTEST's top-16 lists with
 * N = 9 and 12, its bisection with N = 40; CORRELATION's units of 4 shifts at +-1 and of 8 at
 * +-4): centroids within 1e-4 px, variances and SNR within 1e-4 relative, intensity
 * within 1e-5 relative, status, valid and saturated equal (status may differ on a lenslet whose
 * threshold decision falls on a rounding difference: the test allows none on these frames).
 * Skips (77) when no GPU is usable.
 */
#define _GNU_SOURCE /* setenv */
#include "testutil.h"

#include "sim/noise.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static sw_context *gpu;
static sw_context *cpu;

static int setup(void **state)
{
    (void)state;
    gpu = sw_test_cuda_context_or_skip();
    cpu = sw_test_cpu_context(0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sw_context_destroy(gpu);
    sw_context_destroy(cpu);
    return 0;
}

#define PITCH  18.5 /* of the spots; the lenslets: PITCH (9 x 9) and SMALL (40 x 40, 4-5 px) */
#define NL     9
#define SMALL  4.25
#define NLS    40
#define W      170
#define FRAMES 3

/* FRAMES frames of Gaussian spots (r.m.s. 1.6 px) moved up to +-3 px, sky 20, Poisson + read noise
 * 3, values in ADU scaled by `scale`; as f32. */
static float *make_frames(double scale)
{
    float *img = malloc((size_t)FRAMES * W * W * sizeof(float));
    for (int f = 0; f < FRAMES; f++) {
        float *p = img + (size_t)f * W * W;
        for (int y = 0; y < W; y++)
            for (int x = 0; x < W; x++) {
                int ix = (int)(x / PITCH), iy = (int)(y / PITCH);
                double cx = (ix + 0.5) * PITCH - 0.5 + 3.0 * sin(1.3 * ix + 0.7 * iy + f);
                double cy = (iy + 0.5) * PITCH - 0.5 + 3.0 * cos(0.9 * ix - 1.1 * iy + 2 * f);
                double d2 = (x - cx) * (x - cx) + (y - cy) * (y - cy);
                double mean = 20.0 + 3000.0 / (2 * 3.14159265 * 2.56) * exp(-d2 / (2 * 2.56));
                size_t i = (size_t)f * W * W + (size_t)y * W + x;
                p[(size_t)y * W + x] =
                    (float)(scale * (sw_noise_poisson(mean, 9, i) + 3.0 * sw_noise_normal(9, i)));
            }
    }
    return img;
}

static sw_image as_type(const float *src, sw_pixel_type t)
{
    sw_image img;
    assert_int_equal(sw_image_alloc(gpu, W, W * FRAMES, t, &img), SW_OK);
    for (int y = 0; y < W * FRAMES; y++)
        for (int x = 0; x < W; x++) {
            double v = src[(size_t)y * W + x];
            char *row = (char *)img.data + (size_t)y * img.stride;
            if (t == SW_PIX_U8)
                ((uint8_t *)row)[x] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            else if (t == SW_PIX_U16)
                ((uint16_t *)row)[x] = (uint16_t)(v < 0 ? 0 : v > 65535 ? 65535 : v);
            else {
                const float fv = (float)v;
                memcpy(row + (size_t)x * sizeof fv, &fv, sizeof fv);
            }
        }
    return img;
}

static void compare(const sw_centroid_result *a, const sw_centroid_result *b, int n,
                    const char *what)
{
    for (int i = 0; i < n; i++) {
        if (a->status[i] != b->status[i] || a->valid[i] != b->valid[i] ||
            a->saturated[i] != b->saturated[i])
            fail_msg("%s: lenslet %d: status %d/%d valid %d/%d saturated %d/%d (CPU/GPU)", what, i,
                     a->status[i], b->status[i], a->valid[i], b->valid[i], a->saturated[i],
                     b->saturated[i]);
        if (!a->valid[i]) {
            assert_true(isnan(b->x[i]));
            continue;
        }
        assert_near(a->x[i], b->x[i], 1e-4);
        assert_near(a->y[i], b->y[i], 1e-4);
        assert_near(a->intensity[i], b->intensity[i], 1e-5 * fabs(a->intensity[i]) + 1e-3);
        assert_near(a->x_var[i], b->x_var[i], 1e-4 * a->x_var[i]);
        assert_near(a->y_var[i], b->y_var[i], 1e-4 * a->y_var[i]);
        assert_near(a->snr[i], b->snr[i], 1e-4 * a->snr[i]);
    }
}

static void one_case(sw_centroid_params *p, const sw_image *frames, int nl, const char *what)
{
    sw_centroid_plan *pc = NULL, *pg = NULL;
    p->path = SW_CENTROID_HOST;
    if (sw_centroid_create(cpu, p, &pc) != SW_OK)
        fail_msg("%s: CPU plan: %s", what, sw_context_error(cpu));
    sw_centroid_result rc;
    assert_int_equal(sw_centroid_result_alloc(pc, FRAMES, SW_MEM_HOST, &rc), SW_OK);
    assert_int_equal(sw_centroid_run(pc, frames, &rc), SW_OK);
    const int n = FRAMES * nl * nl;
    const sw_centroid_path paths[3] = {SW_CENTROID_COPY, SW_CENTROID_MAPPED, SW_CENTROID_DEVICE};
    const sw_memory mems[3] = {SW_MEM_HOST, SW_MEM_PINNED, SW_MEM_PINNED};
    for (int k = 0; k < 3; k++) {
        p->path = paths[k];
        if (sw_centroid_create(gpu, p, &pg) != SW_OK)
            fail_msg("%s: GPU plan: %s", what, sw_context_error(gpu));
        sw_image in = *frames, dev = {0};
        if (paths[k] == SW_CENTROID_DEVICE) {
            assert_int_equal(sw_image_alloc_device(gpu, W, W * FRAMES, frames->type, &dev), SW_OK);
            assert_int_equal(sw_image_copy(gpu, frames, &dev), SW_OK);
            in = dev;
        }
        sw_centroid_result rg;
        assert_int_equal(sw_centroid_result_alloc(pg, FRAMES, mems[k], &rg), SW_OK);
        assert_int_equal(sw_centroid_run(pg, &in, &rg), SW_OK);
        assert_int_equal(sw_context_synchronize(gpu), SW_OK);
        compare(&rc, &rg, n, what);
        /* every group size on the device path (cm_shape's choice is one of them) */
        for (int lanes = 1; paths[k] == SW_CENTROID_DEVICE && lanes <= 32; lanes *= 2) {
            char env[16], msg[96];
            snprintf(env, sizeof env, "%d", lanes);
            setenv("SPOTWAVE_CENTROID_LANES", env, 1);
            sw_centroid_plan *pl = NULL;
            const sw_status st = sw_centroid_create(gpu, p, &pl);
            unsetenv("SPOTWAVE_CENTROID_LANES");
            if (st != SW_OK)
                fail_msg("%s, %d lanes: GPU plan: %s", what, lanes, sw_context_error(gpu));
            sw_centroid_result rl;
            assert_int_equal(sw_centroid_result_alloc(pl, FRAMES, SW_MEM_PINNED, &rl), SW_OK);
            assert_int_equal(sw_centroid_run(pl, &in, &rl), SW_OK);
            assert_int_equal(sw_context_synchronize(gpu), SW_OK);
            snprintf(msg, sizeof msg, "%s, %d lanes", what, lanes);
            compare(&rc, &rl, n, msg);
            sw_centroid_result_free(&rl);
            sw_centroid_destroy(pl);
        }
        sw_centroid_result_free(&rg);
        sw_image_free(&dev);
        sw_centroid_destroy(pg);
    }
    sw_centroid_result_free(&rc);
    sw_centroid_destroy(pc);
}

static void test_methods(void **state)
{
    (void)state;
    float *f32 = make_frames(1.0), *ref = make_frames(1.0);
    /* the correlation template: frame 1 as a reference image of one frame's size */
    const sw_pixel_type types[3] = {SW_PIX_U8, SW_PIX_U16, SW_PIX_F32};
    uint8_t mask[NLS * NLS];
    memset(mask, 1, sizeof mask);
    mask[3] = mask[40] = 0;
    for (int t = 0; t < 3; t++) {
        float *src = types[t] == SW_PIX_U8 ? make_frames(0.25) : f32;
        sw_image frames = as_type(src, types[t]);
        if (src != f32)
            free(src);
        for (int c = 0; c < 20; c++) {
            const int m = c % 10, small = c >= 10, nl = small ? NLS : NL;
            sw_centroid_params p;
            sw_centroid_params_default(&p);
            p.geometry.x0 = 0;
            p.geometry.y0 = 0;
            p.geometry.pitch_px = small ? SMALL : PITCH;
            p.geometry.nx = p.geometry.ny = nl;
            p.geometry.valid = mask;
            p.width = p.height = W;
            p.type = types[t];
            p.max_frames = FRAMES;
            p.gain_e_per_adu = types[t] == SW_PIX_U8 ? 4.0 : 1.0;
            p.read_noise_e = 3.0;
            p.saturation = types[t] == SW_PIX_F32 ? 400.0 : 0.0;
            p.min_snr = 20.0;
            p.max_shift_px = 3.5;
            p.peak_border = m != 4;
            p.edge_fraction = 0.3;
            p.window = m == 2 ? 1 : 0;
            static const char *names[10] = {"cog",
                                            "wcog fixed",
                                            "wcog iter",
                                            "local",
                                            "corr",
                                            "brightest",
                                            "quadcell (1 pass)",
                                            "cog, ring variance, fraction",
                                            "quadcell, ring variance",
                                            "brightest N = 9"};
            switch (m) {
            case 0: p.method = SW_CENTROID_METHOD_COG; break;
            case 1:
            case 2:
                p.method = SW_CENTROID_METHOD_WCOG;
                p.fwhm_px = 5.0;
                p.wcog_iterations = m == 2 ? 4 : 0;
                break;
            case 3: p.method = SW_CENTROID_METHOD_LOCAL; break;
            case 4:
                p.method = SW_CENTROID_METHOD_CORRELATION;
                p.corr_reference = ref;
                /* +-1 (units of 4 shifts) also on the large lenslets of the u16 frames */
                p.corr_search_px = small || types[t] == SW_PIX_U16 ? 1 : 4;
                break;
            case 5:
                p.method = SW_CENTROID_METHOD_BRIGHTEST;
                /* the top-16 lists merged over the lanes; the bisection */
                p.brightest_n = small ? 12 : 40;
                break;
            case 9: /* the top-16 lists on the large lenslets too (N + 1 <= 16) */
                p.method = SW_CENTROID_METHOD_BRIGHTEST;
                p.brightest_n = 9;
                break;
            case 7: /* no detector model, FRACTION: the region in shared memory, 3 passes */
                p.method = SW_CENTROID_METHOD_COG;
                p.gain_e_per_adu = p.read_noise_e = 0.0;
                p.threshold_kind = SW_THRESHOLD_FRACTION;
                p.threshold_mode = SW_THRESHOLD_SUBTRACT;
                p.threshold = 0.1;
                p.min_snr = 0.0; /* the ring's spread is not the spots' noise */
                break;
            default: /* m 6: one pass, pixels straight from the frame; m 8: the ring's variance */
                p.method = SW_CENTROID_METHOD_QUADCELL;
                p.fwhm_px = 3.8;
                if (m == 8) {
                    p.gain_e_per_adu = p.read_noise_e = 0.0;
                    p.min_snr = 0.0;
                }
                break;
            }
            char what[64];
            snprintf(what, sizeof what, "%s, %s, pitch %g", names[m],
                     sw_pixel_type_string(types[t]), p.geometry.pitch_px);
            one_case(&p, &frames, nl, what);
        }
        sw_image_free(&frames);
    }
    free(f32);
    free(ref);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_methods)};
    return cmocka_run_group_tests(tests, setup, teardown);
}

/*
 * bench_core: the foundation's kernel-backed image operations on non-trivial data.
 *
 *   image_convert  u16 -> f32 (out = in / 65535) and f32 -> u16 (out = in * 65535, inputs in
 *                  [0, 1) so nothing clips); throughput = (bytes read + bytes written) / median
 *   image_stats    f32 and u16 one-pass statistics; throughput = bytes read / median
 *   image_copy     f32 copy (cudaMemcpy2D on the device, memmove per row on the CPU): the
 *                  memory-bandwidth ceiling the other cases are compared to
 *
 * Sizes 2048x2048 and 8192x8192 (--quick: 512x512 and 1024x1024). On the CUDA backend the
 * images live on the device (sw_image_alloc_device, filled once through sw_image_copy) so only
 * the kernels are timed; on the CPU they are host images. Each case rotates among several
 * input/output sets, as many as make >= 256 MiB of traffic per turn (at least 2, at most 16),
 * so that the last-level cache (CPU L3, GPU L2) cannot hold the working set.
 */
#include "harness.h"

#include "spotwave/rng.h"

#include <stdlib.h>
#include <string.h>

#define PROG         "bench_core"
#define ROTATE_BYTES (256.0 * 1024 * 1024)
#define MAX_SETS     16

/* Fills a host image with reproducible values: u16 over the full range, f32 in [0, 1). */
static void fill(sw_image *img, uint64_t seed)
{
    const uint64_t w = (uint64_t)img->width;
    for (int32_t y = 0; y < img->height; y++) {
        void *row = sw_image_row(img, y);
        for (int32_t x0 = 0; x0 < img->width; x0 += 4) {
            sw_rng4 r = sw_rng_draw(seed, SW_RNG_STREAM_USER, ((uint64_t)y * w + (uint64_t)x0) / 4);
            for (int32_t k = 0; k < 4 && x0 + k < img->width; k++) {
                if (img->type == SW_PIX_U16)
                    ((uint16_t *)row)[x0 + k] = (uint16_t)(r.v[k] >> 16);
                else
                    ((float *)row)[x0 + k] = sw_rng_u01f(r.v[k]) * 0.99999f;
            }
        }
    }
}

/* A set of `n` images of one size and type, in the memory the backend computes on. */
typedef struct image_set {
    int n;
    sw_image img[MAX_SETS];
} image_set;

static void set_free(image_set *s)
{
    for (int i = 0; i < s->n; i++)
        sw_image_free(&s->img[i]);
    s->n = 0;
}

/* Allocates n images; fills them (seed + i) when fill_seed != 0, else leaves them zeroed. */
static sw_status set_alloc(sw_context *ctx, int n, int32_t w, int32_t h, sw_pixel_type t,
                           uint64_t fill_seed, image_set *s)
{
    const int device = sw_context_backend(ctx) == SW_BACKEND_CUDA;
    sw_image staging = {0};
    sw_status st = SW_OK;
    memset(s, 0, sizeof *s);
    if (device && fill_seed)
        st = sw_image_alloc(ctx, w, h, t, &staging);
    for (int i = 0; i < n && st == SW_OK; i++) {
        sw_image *img = &s->img[i];
        st = device ? sw_image_alloc_device(ctx, w, h, t, img) : sw_image_alloc(ctx, w, h, t, img);
        if (st != SW_OK)
            break;
        s->n = i + 1;
        if (!fill_seed) {
            /* Outputs: write every page now (on the host, fresh pages are mapped on first
             * touch), so that the first pass over the rotating sets does not time page faults. */
            if (!device)
                memset(img->data, 0, img->stride * (size_t)img->height);
            continue;
        }
        if (device) {
            fill(&staging, fill_seed + (uint64_t)i);
            st = sw_image_copy(ctx, &staging, img);
        } else {
            fill(img, fill_seed + (uint64_t)i);
        }
    }
    sw_image_free(&staging);
    if (st != SW_OK)
        set_free(s);
    return st;
}

typedef struct convert_job {
    sw_context *ctx;
    image_set *in, *out;
    double scale;
} convert_job;

static sw_status run_convert(void *user, int sample, double *measured_us)
{
    convert_job *j = user;
    int k = sample % j->in->n;
    size_t clipped = 0;
    (void)measured_us; /* timed by the harness: host clock + sw_context_synchronize */
    return sw_image_convert(j->ctx, &j->in->img[k], &j->out->img[k], j->scale, 0.0, &clipped);
}

typedef struct copy_job {
    sw_context *ctx;
    image_set *in, *out;
} copy_job;

static sw_status run_copy(void *user, int sample, double *measured_us)
{
    copy_job *j = user;
    int k = sample % j->in->n;
    (void)measured_us;
    return sw_image_copy(j->ctx, &j->in->img[k], &j->out->img[k]);
}

typedef struct stats_job {
    sw_context *ctx;
    image_set *in;
    sw_image_stats stats;
} stats_job;

static sw_status run_stats(void *user, int sample, double *measured_us)
{
    stats_job *j = user;
    (void)measured_us;
    return sw_image_stats_compute(j->ctx, &j->in->img[sample % j->in->n], &j->stats);
}

/* Runs the four cases at one size. 0 on success, 1 on failure (a line is printed). */
static int bench_size(const sw_bench_options *o, sw_context *ctx, int32_t w, int32_t h)
{
    const double px = (double)w * (double)h;
    int n = (int)(ROTATE_BYTES / (px * (2 + 4)) + 0.999);
    n = n < 2 ? 2 : (n > MAX_SETS ? MAX_SETS : n);
    char config[96];
    int rc = 1;
    image_set in16 = {0}, in32 = {0}, out16 = {0}, out32 = {0};

    if (!o->json_only)
        fprintf(stderr, "# %s: preparing %dx%d images, %d rotating sets\n", PROG, w, h, n);
    sw_status st = set_alloc(ctx, n, w, h, SW_PIX_U16, 1000, &in16);
    if (st == SW_OK)
        st = set_alloc(ctx, n, w, h, SW_PIX_F32, 2000, &in32);
    if (st == SW_OK)
        st = set_alloc(ctx, n, w, h, SW_PIX_U16, 0, &out16);
    if (st == SW_OK)
        st = set_alloc(ctx, n, w, h, SW_PIX_F32, 0, &out32);
    if (st != SW_OK) {
        fprintf(stderr, "%s: cannot prepare %d sets of %dx%d images: %s\n", PROG, n, w, h,
                sw_context_error(ctx));
        goto done;
    }

    copy_job kj = {ctx, &in32, &out32};
    snprintf(config, sizeof config, "f32 %dx%d", w, h);
    sw_bench_case c = {"image_copy", config, ctx, run_copy, &kj, px * (4 + 4), 0, NULL};
    if (sw_bench_run(o, &c, NULL) != SW_OK)
        goto done;

    convert_job cj = {ctx, &in16, &out32, 1.0 / 65535.0};
    snprintf(config, sizeof config, "u16->f32 %dx%d", w, h);
    c = (sw_bench_case){"image_convert", config, ctx, run_convert, &cj, px * (2 + 4), 0, NULL};
    if (sw_bench_run(o, &c, NULL) != SW_OK)
        goto done;

    cj = (convert_job){ctx, &in32, &out16, 65535.0};
    snprintf(config, sizeof config, "f32->u16 %dx%d", w, h);
    c = (sw_bench_case){"image_convert", config, ctx, run_convert, &cj, px * (4 + 2), 0, NULL};
    if (sw_bench_run(o, &c, NULL) != SW_OK)
        goto done;

    stats_job sj = {.ctx = ctx, .in = &in32};
    snprintf(config, sizeof config, "f32 %dx%d", w, h);
    c = (sw_bench_case){"image_stats", config, ctx, run_stats, &sj, px * 4, 0, NULL};
    if (sw_bench_run(o, &c, NULL) != SW_OK)
        goto done;
    /* A sanity check that the work was done: uniform [0, 1) has mean 1/2, stddev 1/sqrt(12). */
    if (sj.stats.n_finite != (int64_t)px || sj.stats.mean < 0.49 || sj.stats.mean > 0.51) {
        fprintf(stderr, "%s: image_stats %s: implausible result (n %lld, mean %g)\n", PROG, config,
                (long long)sj.stats.n_finite, sj.stats.mean);
        goto done;
    }

    sj = (stats_job){.ctx = ctx, .in = &in16};
    snprintf(config, sizeof config, "u16 %dx%d", w, h);
    c = (sw_bench_case){"image_stats", config, ctx, run_stats, &sj, px * 2, 0, NULL};
    if (sw_bench_run(o, &c, NULL) != SW_OK)
        goto done;
    rc = 0;
done:
    set_free(&out32);
    set_free(&out16);
    set_free(&in32);
    set_free(&in16);
    return rc;
}

int main(int argc, char **argv)
{
    sw_bench_options o;
    int rc = sw_bench_parse_args(
        argc, argv, PROG,
        "Cases: image_copy f32; image_convert u16->f32, f32->u16; image_stats f32, u16;\n"
        "at 2048x2048 and 8192x8192 (--quick: 512x512, 1024x1024).\n",
        &o);
    if (rc != SW_BENCH_CONTINUE)
        return rc;
    sw_context *ctx = NULL;
    if (sw_bench_context(&o, PROG, &ctx) != 0)
        return 1;

    static const int32_t full[] = {2048, 8192}, quick[] = {512, 1024};
    const int32_t *sizes = o.quick ? quick : full;
    rc = 0;
    for (int i = 0; i < 2 && rc == 0; i++)
        rc = bench_size(&o, ctx, sizes[i], sizes[i]);
    sw_bench_finish(&o);
    sw_context_destroy(ctx);
    return rc;
}

/*
 * bench_refine: position refinement (refine.h) of 10^4 spots on a 2048^2 star field (sigma 1.5
 * px, Poisson sky and read noise), GAUSS and XWIN, each with no background and with the annulus
 * (stamp radius 6, annulus 8 .. 14 px: ~400 pixels): "METHOD none" times the method's own step,
 * "METHOD annulus" minus "METHOD none" the annulus background's. Cases per method and
 * background:
 *   gpu kernel   the refinement kernel alone (CUDA events): the target is under 100 us
 *                for 10^4 spots on an H100;
 *   gpu run      sw_refine_run on a device frame: seeds built and uploaded, kernel, the packed
 *                x, y, variances and flags back, written to the spots (host clock around the
 *                call alone: the restoring of the seeds between calls is not counted);
 *   cpu run      sw_refine_run on the host (OpenMP over spots), timed the same way.
 * The GPU cases' config names the lanes per spot. SPOTWAVE_REFINE_LANES=32|16|8 picks them
 * (refine_cuda.cu; default 16 for GAUSS and MOFFAT without a background step, else 32). To
 * compare in one run:
 *   for l in 32 16 8; do SPOTWAVE_REFINE_LANES=$l bench_refine; done
 * --quick: 2000 spots, GAUSS only. Unless --json-only, stderr also gets the passes a spot (fit
 * passes or window iterations, mean and most) of each method on each backend.
 */
#include "harness.h"

#include "spotwave/refine.h"
#include "spotwave/sim.h"
#ifdef SW_HAVE_CUDA
#include "find/refine_internal.h"
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "bench_refine"

typedef struct job {
    sw_refine_plan *plan;
    const sw_image *frame;
    const sw_spot *seeds;
    sw_spot *work;
    int64_t n;
    int kernel_only;
} job;

static sw_status run_once(void *user, int sample, double *measured_us)
{
    (void)sample;
    job *j = user;
    memcpy(j->work, j->seeds, (size_t)j->n * sizeof(sw_spot));
    const double t0 = sw_bench_now_us();
    sw_status st = sw_refine_run(j->plan, j->frame, j->work, j->n, NULL); /* synchronous */
    *measured_us = sw_bench_now_us() - t0;
#ifdef SW_HAVE_CUDA
    if (st == SW_OK && j->kernel_only)
        *measured_us = sw_refine_gpu_kernel_us(j->plan);
#endif
    return st;
}

/* A field of n stars on a jittered grid (no blends), sigma 1.5, as u16 ADU. */
static sw_status make_field(sw_context *cpu, int32_t w, int32_t h, int64_t n, sw_image *adu,
                            sw_spot *seeds)
{
    sw_stars stars;
    sw_status st = sw_stars_alloc(cpu, n, &stars);
    if (st != SW_OK)
        return st;
    const int64_t cols = (int64_t)ceil(sqrt((double)n * w / h));
    const double dx = (double)w / cols, dy = (double)h / ((n + cols - 1) / cols);
    uint64_t r = 12345;
    for (int64_t k = 0; k < n; k++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(r >> 11) / 9007199254740992.0;
        stars.x[k] = (k % cols + 0.5) * dx + 0.2 * dx * (u - 0.5);
        stars.y[k] = (k / cols + 0.5) * dy - 0.2 * dy * (u - 0.5);
        stars.flux[k] = 2000.0 + 40000.0 * u;
        memset(&seeds[k], 0, sizeof(sw_spot));
        seeds[k].x = stars.x[k] + 0.3;
        seeds[k].y = stars.y[k] - 0.2;
        seeds[k].x0 = (int32_t)seeds[k].x - 3;
        seeds[k].x1 = seeds[k].x0 + 7;
        seeds[k].y0 = (int32_t)seeds[k].y - 3;
        seeds[k].y1 = seeds[k].y0 + 7;
    }
    sw_starsim_params sp;
    sw_starsim_params_default(&sp);
    sp.width = w;
    sp.height = h;
    sp.sigma = 1.5;
    sp.roi_side = 15;
    sp.psf = SW_PSF_INTEGRATED;
    sp.method = SW_STARSIM_OPENMP;
    sp.max_stars = n;
    sw_starsim *sim = NULL;
    sw_image e = {0};
    st = sw_starsim_create(cpu, &sp, &sim);
    if (st == SW_OK)
        st = sw_image_alloc(cpu, w, h, SW_PIX_F32, &e);
    if (st == SW_OK)
        st = sw_starsim_run(sim, &stars, &e);
    if (st == SW_OK)
        st = sw_image_alloc(cpu, w, h, SW_PIX_U16, adu);
    if (st == SW_OK) {
        sw_detector d;
        sw_detector_default(&d);
        d.sky_e = 100.0;
        d.shot_noise = 1;
        d.read_noise_e = 5.0;
        d.gain_e_per_adu = 1.0;
        d.bias_adu = 100.0;
        d.out_type = SW_PIX_U16;
        st = sw_detector_apply(cpu, &d, &e, adu);
    }
    sw_image_free(&e);
    sw_starsim_destroy(sim);
    sw_stars_free(&stars);
    return st;
}

static int bench_method(const sw_bench_options *o, sw_context *gpu, sw_context *cpu,
                        const sw_image *host, const sw_spot *seeds, sw_spot *work, int64_t n,
                        sw_refine_method m, sw_refine_background bg)
{
    char config[128];
    snprintf(config, sizeof config, "%s %s, %lld spots, %dx%d u16", sw_refine_method_string(m),
             sw_refine_background_string(bg), (long long)n, host->width, host->height);
    sw_refine_params p;
    sw_refine_params_default(&p, host->width, host->height, host->type);
    p.method = m;
    p.background = bg;
    p.read_noise = 5.0;
    p.bias = 100.0;
    int rc = 0;
    for (int b = 0; b < 2 && rc == 0; b++) {
        sw_context *ctx = b ? gpu : cpu;
        if (!ctx)
            continue;
        sw_refine_plan *plan = NULL;
        if (sw_refine_create(ctx, &p, &plan) != SW_OK) {
            fprintf(stderr, "%s: %s\n", PROG, sw_context_error(ctx));
            return 1;
        }
        char gpu_config[160];
        snprintf(gpu_config, sizeof gpu_config, "%s", config);
#ifdef SW_HAVE_CUDA
        if (b)
            snprintf(gpu_config, sizeof gpu_config, "%s, %d lanes/spot", config,
                     sw_refine_gpu_lanes(plan));
#endif
        sw_image dev = {0};
        const sw_image *frame = host;
        if (b) {
            if (sw_image_alloc_device(ctx, host->width, host->height, host->type, &dev) != SW_OK ||
                sw_image_copy(ctx, host, &dev) != SW_OK) {
                fprintf(stderr, "%s: %s\n", PROG, sw_context_error(ctx));
                sw_refine_destroy(plan);
                return 1;
            }
            frame = &dev;
        }
        /* the passes a spot (fit passes or window iterations) on this backend, on stderr: the
         * kernel's time follows them */
        sw_refine_result *res = o->json_only ? NULL : calloc((size_t)n, sizeof(*res));
        if (res) {
            memcpy(work, seeds, (size_t)n * sizeof(sw_spot));
            if (sw_refine_run(plan, frame, work, n, res) == SW_OK) {
                double sum = 0.0;
                int32_t most = 0;
                for (int64_t k = 0; k < n; k++) {
                    sum += res[k].iterations;
                    most = res[k].iterations > most ? res[k].iterations : most;
                }
                fprintf(stderr, "%s: %s on %s: %.3f passes a spot, at most %d\n", PROG, config,
                        b ? "cuda" : "cpu", sum / (double)n, (int)most);
            }
            free(res);
        }
        for (int k = 0; k < (b ? 2 : 1) && rc == 0; k++) {
            job j = {plan, frame, seeds, work, n, b && k == 0};
            sw_bench_case c = {b ? (k == 0 ? "refine_gpu_kernel" : "refine_gpu_run")
                                 : "refine_cpu_run",
                               gpu_config,
                               ctx,
                               run_once,
                               &j,
                               0.0,
                               (double)n / 1e6,
                               "Mspot"};
            if (sw_bench_run(o, &c, NULL) != SW_OK)
                rc = 1;
        }
        sw_image_free(&dev);
        sw_refine_destroy(plan);
    }
    return rc;
}

int main(int argc, char **argv)
{
    sw_bench_options o;
    int rc = sw_bench_parse_args(argc, argv, PROG, NULL, &o);
    if (rc != SW_BENCH_CONTINUE)
        return rc;
    sw_context *gpu = NULL, *cpu = NULL;
    if (sw_bench_contexts(&o, PROG, 1, &gpu, &cpu) != 0)
        return 1;
    const int64_t n = o.quick ? 2000 : 10000;
    sw_spot *seeds = malloc((size_t)n * sizeof(sw_spot)),
            *work = malloc((size_t)n * sizeof(sw_spot));
    sw_image host = {0};
    rc = !seeds || !work;
    if (rc == 0 && make_field(cpu, 2048, 2048, n, &host, seeds) != SW_OK) {
        fprintf(stderr, "%s: %s\n", PROG, sw_context_error(cpu));
        rc = 1;
    }
    if (rc == 0)
        rc = bench_method(&o, gpu, cpu, &host, seeds, work, n, SW_REFINE_GAUSS, SW_BACKGROUND_NONE);
    if (rc == 0 && !o.quick)
        rc = bench_method(&o, gpu, cpu, &host, seeds, work, n, SW_REFINE_XWIN, SW_BACKGROUND_NONE);
    if (rc == 0 && !o.quick)
        rc = bench_method(&o, gpu, cpu, &host, seeds, work, n, SW_REFINE_XWIN,
                          SW_BACKGROUND_ANNULUS);
    if (rc == 0 && !o.quick)
        rc = bench_method(&o, gpu, cpu, &host, seeds, work, n, SW_REFINE_GAUSS,
                          SW_BACKGROUND_ANNULUS);
    sw_bench_finish(&o);
    if (!o.json_only)
        fprintf(stderr, "target (issue 23): refinement of 10^4 spots in under 100 us on an H100\n");
    sw_image_free(&host);
    free(seeds);
    free(work);
    sw_context_destroy(gpu);
    sw_context_destroy(cpu);
    return rc;
}

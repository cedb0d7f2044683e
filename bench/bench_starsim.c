/*
 * bench_starsim: seed 004's two benchmarks (Li et al., Sec. IV), on our CPU and GPU simulators.
 *
 *   test1  2^5 .. 2^17 stars, ROI 10 x 10, 1024 x 1024 image
 *   test2  ROI side 2 .. 32 (even sides), 8192 stars, 1024 x 1024 image
 *
 * Stars as the seed's: uniform positions over the image, magnitudes uniform in [0, 15], flux by
 * Eq. (1) with r = 2.512; the PSF sampled at pixel centres (Eq. 2) with sigma = 1.5 px.
 * Cases per configuration (the "bench" field):
 *   starsim_sequential  CPU, one thread (the seed's baseline, Fig. 5), host image
 *   starsim_openmp      CPU, all threads, host image
 *   starsim_<m>_device  GPU, m = parallel | adaptive | deterministic: device time of the
 *                       rendering kernels (CUDA events; the seed's "kernel time")
 *   starsim_<m>_host    GPU: the whole run into a pinned host image (star validation and
 *                       packing, upload, clear, kernels, copy of the image back to the host),
 *                       host clock: the default, in bands of rows (sw_starsim_set_bands: each
 *                       band's rows copied back while the next renders); its JSON line carries
 *                       the floor (below) and the ratios median / floor and p99 / floor
 *   starsim_<m>_host_whole  as _host with one band (render the whole image, then copy it: the
 *                       order before issue 25)
 *   starsim_adaptive_host_bands<n>  as starsim_adaptive_host with n = 4 and 16 bands (the
 *                       default at 1024x1024 is 8)
 *   starsim_floor       the transfer floor of a run into a host image (harness.h,
 *                       sw_bench_floor_case): one empty kernel + stream synchronisation, plus the
 *                       CUDA-event time of a pinned device-to-host copy of the 4 MiB image (no
 *                       bytes in: the stars' upload is not counted); measured once, config
 *                       "floor 1024x1024 f32".
 *   starsim_<m>_oneshot GPU: plan creation (device buffers, the adaptive look-up table) + run
 *                       into a host image + destruction: the seed's "application time", where
 *                       the table is built per simulation
 * Throughput: stars per second (Mstar/s). The harness's JSON lines go to stdout.
 * --stars N: test1 with N stars only (no test2): e.g. --stars 131072, the 2^17-star field of
 * issue 25.
 */
#include "harness.h"

#include "spotwave/rng.h"
#include "spotwave/sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PROG  "bench_starsim"
#define SIZE  1024
#define SIGMA 1.5

static double floor_us; /* the host runs' transfer floor (0: not measured) */

typedef struct job {
    sw_context *ctx;
    sw_starsim_params p;
    sw_starsim *plan;
    const sw_stars *stars;
    sw_image *out;
    int device_time; /* report the kernels' CUDA-event time */
    int oneshot;     /* create + run + destroy per call */
} job;

static sw_status run_job(void *user, int sample, double *measured_us)
{
    job *j = user;
    (void)sample;
    if (j->oneshot) {
        sw_starsim *plan = NULL;
        sw_status st = sw_starsim_create(j->ctx, &j->p, &plan);
        if (st == SW_OK)
            st = sw_starsim_run(plan, j->stars, j->out);
        sw_starsim_destroy(plan);
        return st;
    }
    sw_status st = sw_starsim_run(j->plan, j->stars, j->out);
    if (st == SW_OK && j->device_time)
        *measured_us = sw_starsim_render_us(j->plan);
    return st;
}

static void make_stars(sw_stars *s, int64_t n, uint64_t seed)
{
    for (int64_t i = 0; i < n; i++) {
        sw_rng4 r = sw_rng_draw(seed, SW_RNG_STREAM_POSITIONS, (uint64_t)i);
        s->x[i] = SIZE * sw_rng_u01(r.v[0], r.v[1]) - 0.5;
        s->y[i] = SIZE * sw_rng_u01(r.v[2], r.v[3]) - 0.5;
        sw_rng4 m = sw_rng_draw(seed, SW_RNG_STREAM_MAGNITUDES, (uint64_t)i);
        s->mag[i] = 15.0 * sw_rng_u01(m.v[0], m.v[1]);
        s->flux[i] = sw_mag_to_flux(s->mag[i], 1e6, 2.512);
    }
}

/* One case; 0 on success. */
static int one(const sw_bench_options *o, sw_context *ctx, const char *bench, const char *config,
               job *j, int64_t n, double floor)
{
    sw_bench_case c = {bench, config, ctx, run_job, j, 0, (double)n * 1e-6, "Mstar"};
    return sw_bench_run_floor(o, &c, floor, NULL, NULL) == SW_OK ? 0 : 1;
}

static int bench_config(const sw_bench_options *o, sw_context *ctx, sw_context *cpu, int64_t n,
                        int side, const char *test)
{
    char config[96];
    snprintf(config, sizeof config, "%s stars=%lld roi=%dx%d %dx%d", test, (long long)n, side, side,
             SIZE, SIZE);
    sw_stars stars;
    if (sw_stars_alloc(cpu, n, &stars) != SW_OK)
        return 1;
    make_stars(&stars, n, 2026);
    sw_starsim_params p;
    sw_starsim_params_default(&p);
    p.width = p.height = SIZE;
    p.sigma = SIGMA;
    p.roi_side = side;
    p.psf = SW_PSF_SAMPLED;
    p.max_stars = n;
    int rc = 0;
    sw_image host = {0}, dev = {0};
    sw_starsim *plan = NULL;
    job j = {0};

    /* CPU: few repetitions (the sequential simulator takes up to a second at 2^17 stars) */
    sw_bench_options oc = *o;
    oc.reps = o->quick ? 2 : 5;
    oc.warmup = 1;
    static const sw_starsim_method cpu_methods[] = {SW_STARSIM_SEQUENTIAL, SW_STARSIM_OPENMP};
    static const char *const cpu_names[] = {"starsim_sequential", "starsim_openmp"};
    rc = sw_image_alloc(cpu, SIZE, SIZE, SW_PIX_F32, &host) != SW_OK;
    for (int k = 0; k < 2 && !rc; k++) {
        p.method = cpu_methods[k];
        if (sw_starsim_create(cpu, &p, &plan) != SW_OK) {
            fprintf(stderr, "%s: %s\n", PROG, sw_context_error(cpu));
            rc = 1;
            break;
        }
        j = (job){cpu, p, plan, &stars, &host, 0, 0};
        rc = one(&oc, cpu, cpu_names[k], config, &j, n, 0);
        sw_starsim_destroy(plan);
        plan = NULL;
    }
    sw_image_free(&host);

    if (!rc && sw_context_backend(ctx) == SW_BACKEND_CUDA) {
        static const sw_starsim_method gm[] = {SW_STARSIM_PARALLEL, SW_STARSIM_ADAPTIVE,
                                               SW_STARSIM_DETERMINISTIC};
        static const char *const gn[] = {"parallel", "adaptive", "deterministic"};
        rc = sw_image_alloc(ctx, SIZE, SIZE, SW_PIX_F32, &host) != SW_OK ||
             sw_image_alloc_device(ctx, SIZE, SIZE, SW_PIX_F32, &dev) != SW_OK;
        for (int k = 0; k < 3 && !rc; k++) {
            char name[64];
            p.method = gm[k];
            if (sw_starsim_create(ctx, &p, &plan) != SW_OK) {
                fprintf(stderr, "%s: %s\n", PROG, sw_context_error(ctx));
                rc = 1;
                break;
            }
            snprintf(name, sizeof name, "starsim_%s_device", gn[k]);
            j = (job){ctx, p, plan, &stars, &dev, 1, 0};
            rc = one(o, ctx, name, config, &j, n, 0);
            snprintf(name, sizeof name, "starsim_%s_host", gn[k]);
            j = (job){ctx, p, plan, &stars, &host, 0, 0};
            rc = rc || one(o, ctx, name, config, &j, n, floor_us);
            /* the whole image rendered, then copied (one band) */
            snprintf(name, sizeof name, "starsim_%s_host_whole", gn[k]);
            rc = rc || sw_starsim_set_bands(plan, 1) != SW_OK ||
                 one(o, ctx, name, config, &j, n, floor_us);
            /* adaptive (the fastest kernel) with 4 and 16 bands, beside the default 8 */
            for (int nb = 4; nb <= 16 && k == 1 && !rc; nb *= 4) {
                snprintf(name, sizeof name, "starsim_%s_host_bands%d", gn[k], nb);
                rc = sw_starsim_set_bands(plan, nb) != SW_OK ||
                     one(o, ctx, name, config, &j, n, floor_us);
            }
            sw_starsim_destroy(plan);
            plan = NULL;
            if (k < 2 && !rc) {
                snprintf(name, sizeof name, "starsim_%s_oneshot", gn[k]);
                j = (job){ctx, p, NULL, &stars, &host, 0, 1};
                sw_bench_options os = *o;
                os.reps = o->quick ? 3 : 20;
                rc = one(&os, ctx, name, config, &j, n, 0);
            }
        }
        /* AUTO's measured crossover for this configuration */
        p.method = SW_STARSIM_AUTO;
        if (!rc && sw_starsim_create(ctx, &p, &plan) == SW_OK) {
            if (sw_starsim_run(plan, &stars, &dev) == SW_OK && !o->json_only)
                fprintf(stderr, "# %s: auto chose %s\n", config,
                        sw_starsim_method_string(sw_starsim_method_used(plan)));
            sw_starsim_destroy(plan);
        }
        sw_image_free(&host);
        sw_image_free(&dev);
    }
    sw_stars_free(&stars);
    return rc;
}

int main(int argc, char **argv)
{
    sw_bench_options o;
    /* --stars N: this program's own option (test1 with N stars only) */
    long only_stars = 0;
    int na = 0;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && strcmp(argv[i], "--stars") == 0) {
            char *end = NULL;
            only_stars = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
            if (!end || *end || only_stars < 1 || only_stars > (1L << 24)) {
                fprintf(stderr, "%s: --stars takes a star count, 1 to 2^24\n", PROG);
                return 2;
            }
            i++;
            continue;
        }
        argv[na++] = argv[i];
    }
    argv[na] = NULL;
    argc = na;
    int rc = sw_bench_parse_args(argc, argv, PROG,
                                 "Seed 004 test1 (2^5..2^17 stars, ROI 10x10) and test2 (ROI side\n"
                                 "2..32, 8192 stars), 1024x1024; --quick: a few configurations.\n"
                                 "--stars N: test1 with N stars only (issue 25: --stars 131072).\n",
                                 &o);
    if (rc != SW_BENCH_CONTINUE)
        return rc;
    sw_context *ctx = NULL, *cpu = NULL;
    if (sw_bench_context(&o, PROG, &ctx) != 0)
        return 1;
    if (sw_bench_cpu_context(&o, PROG, &cpu) != 0) {
        sw_context_destroy(ctx);
        return 1;
    }
    rc = 0;
    if (sw_context_backend(ctx) == SW_BACKEND_CUDA) {
        /* the floor of a run into a host image: one synchronisation + the image's copy back */
        sw_bench_floor fl;
        char fconfig[64];
        snprintf(fconfig, sizeof fconfig, "floor %dx%d f32", SIZE, SIZE);
        if (sw_bench_floor_case(&o, "starsim_floor", fconfig, ctx, 0.0, 4.0 * SIZE * SIZE, &fl)) {
            sw_context_destroy(cpu);
            sw_context_destroy(ctx);
            return 1;
        }
        floor_us = fl.floor_us;
        if (!o.json_only)
            fprintf(stderr,
                    "# floor of a host run: %.1f us = sync %.1f us + 4 MiB device-to-host %.1f us "
                    "(%.1f GB/s)\n",
                    fl.floor_us, fl.sync_us, fl.d2h_us, fl.d2h_gbps);
    }
    if (only_stars > 0) {
        rc = bench_config(&o, ctx, cpu, (int64_t)only_stars, 10, "test1");
    } else {
        for (int e = 5; e <= 17 && !rc; e += o.quick ? 6 : 1)
            rc = bench_config(&o, ctx, cpu, (int64_t)1 << e, 10, "test1");
        for (int side = 2; side <= 32 && !rc; side += o.quick ? 15 : 2)
            rc = bench_config(&o, ctx, cpu, 8192, side, "test2");
    }
    sw_bench_finish(&o);
    sw_context_destroy(cpu);
    sw_context_destroy(ctx);
    return rc;
}

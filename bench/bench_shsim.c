/*
 * bench_shsim: the Shack-Hartmann spot simulator (sim_sh.h), both models, on the CPU and the GPU.
 *
 * Configurations (the "config" field):
 *   a  1280 x 1280, 18 x 18 lenslets of 64 px, a circular pupil lighting ~250 of them (seed 001's
 *      ocular images: 1280 x 1280, a few hundred sharp spots), geometric and diffraction
 *   b  2560 x 2560, 50 x 50 lenslets of 48 px, a circular pupil lighting ~2000, both models
 *   c  1024 x 1024, 64 x 64 lenslets of 16 px, full aperture (4096 spots), diffraction
 * 5.5 um pixels, f = 3.5 mm, 0.8 um, a fixed smooth aberration (Zernike orders 2-4), automatic
 * sampling (printed as "# ..." lines on stderr).
 * Cases per configuration and model (the "bench" field):
 *   shsim_<model>_device  GPU: the rendering kernels into a device image (CUDA events)
 *   shsim_<model>_host    GPU: run into a host image (clear, kernels, copy back), host clock
 *   shsim_<model>_newopd  GPU: a new OPD each frame (clear_opd + add_zernike on the host, truth
 *                         and upload, then the run into a device image), host clock
 *   shsim_<model>_cpu     CPU: run into a host image, all threads (few repetitions)
 * Throughput: frames per second.
 */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PROG "bench_shsim"

typedef struct job {
    sw_shsim *plan;
    sw_image *out;
    int device_time; /* report the kernels' CUDA-event time */
    int new_opd;     /* set the OPD before each run */
    const double *coef;
    double radius;
} job;

static const double COEF[15] = {0,    0,    0,     0.08,  0.25, -0.06, 0.03, -0.04,
                                0.02, 0.01, 0.015, -0.02, 0.03, 0.01,  -0.01};

static sw_status run_job(void *user, int sample, double *measured_us)
{
    job *j = user;
    sw_status st = SW_OK;
    if (j->new_opd) {
        /* a slightly different aberration each frame, so that nothing is reused */
        double c[15];
        memcpy(c, j->coef, sizeof c);
        c[4] *= 1.0 + 0.01 * (sample % 7);
        st = sw_shsim_clear_opd(j->plan);
        if (st == SW_OK)
            st = sw_shsim_add_zernike(j->plan, c, 15, j->radius);
    }
    if (st == SW_OK)
        st = sw_shsim_run(j->plan, j->out, 0);
    if (st == SW_OK && j->device_time)
        *measured_us = sw_shsim_render_us(j->plan);
    return st;
}

typedef struct shape {
    const char *name;
    int32_t size, n, origin;
    double pitch, pupil_lenslets; /* pupil diameter in lenslet pitches (0: none) */
    int models;                   /* bit 0: geometric, bit 1: diffraction */
} shape;

static int lit_count(const sw_sh_truth *t)
{
    int n = 0;
    for (int64_t l = 0; l < (int64_t)t->nx * t->ny; l++)
        n += !isnan(t->x_px[l]);
    return n;
}

static int one_case(const sw_bench_options *o, sw_context *ctx, const char *bench, const char *cfg,
                    job *j)
{
    sw_bench_case c = {bench, cfg, ctx, run_job, j, 0, 1.0, "frame"};
    return sw_bench_run(o, &c, NULL) == SW_OK ? 0 : 1;
}

static int bench_config(const sw_bench_options *o, sw_context *ctx, sw_context *cpu,
                        const shape *cf)
{
    int rc = 0;
    for (int m = 0; m < 2 && !rc; m++) {
        if (!(cf->models & (1 << m)))
            continue;
        sw_shsim_params p;
        sw_shsim_params_default(&p);
        p.width = p.height = cf->size;
        p.geom.nx = p.geom.ny = cf->n;
        p.geom.pitch_px = cf->pitch;
        p.geom.x0 = p.geom.y0 = cf->origin;
        p.geom.pixel_um = 5.5;
        p.geom.focal_mm = 3.5;
        p.model = m ? SW_SH_DIFFRACTION : SW_SH_GEOMETRIC;
        const double pu = cf->pitch * p.geom.pixel_um;
        if (cf->pupil_lenslets > 0)
            p.pupil = sw_pupil_circle(cf->pupil_lenslets * pu);
        const double radius = 0.5 * (cf->pupil_lenslets > 0 ? cf->pupil_lenslets : cf->n) * pu;
        const char *model = sw_sh_model_string(p.model);
        char config[160], bench[64];

        /* CPU */
        sw_shsim *plan = NULL;
        sw_image host = {0}, dev = {0};
        if (sw_shsim_create(cpu, &p, &plan) != SW_OK ||
            sw_shsim_add_zernike(plan, COEF, 15, radius) != SW_OK) {
            fprintf(stderr, "%s: %s\n", PROG, sw_context_error(cpu));
            sw_shsim_destroy(plan);
            return 1;
        }
        sw_sh_truth t;
        if (sw_shsim_truth(plan, &t) != SW_OK) {
            sw_shsim_destroy(plan);
            return 1;
        }
        const int lit = lit_count(&t);
        sw_sh_truth_free(&t);
        const sw_shsim_params *u = sw_shsim_params_used(plan);
        snprintf(config, sizeof config, "%s %dx%d %dx%d lenslets of %g px, %d spots", cf->name,
                 (int)cf->size, (int)cf->size, (int)cf->n, (int)cf->n, cf->pitch, lit);
        if (!o->json_only) {
            const double z = 0.8 * 3500.0 / (pu * 5.5);
            if (m)
                fprintf(stderr,
                        "# %s, %s: z = %.3f px, oversample %d, FFT %d, lenslet %.2f pupil "
                        "samples\n",
                        config, model, z, (int)u->oversample, (int)u->fft_size,
                        (double)u->fft_size / (z * u->oversample));
            else
                fprintf(stderr, "# %s, %s: sigma %.3f px, ROI %d px, %d samples per lenslet\n",
                        config, model, u->sigma_px, (int)u->roi_px, (int)u->samples);
        }
        sw_bench_options oc = *o;
        oc.reps = o->quick ? 2 : 5;
        oc.warmup = 1;
        job j = {plan, &host, 0, 0, COEF, radius};
        rc = sw_image_alloc(cpu, cf->size, cf->size, SW_PIX_F32, &host) != SW_OK;
        snprintf(bench, sizeof bench, "shsim_%s_cpu", model);
        if (!rc)
            rc = one_case(&oc, cpu, bench, config, &j);
        sw_shsim_destroy(plan);
        sw_image_free(&host);
        plan = NULL;

        /* GPU */
        if (!rc && sw_context_backend(ctx) == SW_BACKEND_CUDA) {
            if (sw_shsim_create(ctx, &p, &plan) != SW_OK ||
                sw_shsim_add_zernike(plan, COEF, 15, radius) != SW_OK) {
                fprintf(stderr, "%s: %s\n", PROG, sw_context_error(ctx));
                sw_shsim_destroy(plan);
                return 1;
            }
            rc = sw_image_alloc(ctx, cf->size, cf->size, SW_PIX_F32, &host) != SW_OK ||
                 sw_image_alloc_device(ctx, cf->size, cf->size, SW_PIX_F32, &dev) != SW_OK;
            j = (job){plan, &dev, 1, 0, COEF, radius};
            snprintf(bench, sizeof bench, "shsim_%s_device", model);
            rc = rc || one_case(o, ctx, bench, config, &j);
            j = (job){plan, &host, 0, 0, COEF, radius};
            snprintf(bench, sizeof bench, "shsim_%s_host", model);
            rc = rc || one_case(o, ctx, bench, config, &j);
            j = (job){plan, &dev, 0, 1, COEF, radius};
            snprintf(bench, sizeof bench, "shsim_%s_newopd", model);
            rc = rc || one_case(o, ctx, bench, config, &j);
            sw_shsim_destroy(plan);
            sw_image_free(&host);
            sw_image_free(&dev);
        }
    }
    return rc;
}

int main(int argc, char **argv)
{
    sw_bench_options o;
    int rc =
        sw_bench_parse_args(argc, argv, PROG,
                            "Configurations a (1280^2, ~250 spots of 64 px), b (2560^2, ~2000\n"
                            "spots of 48 px), both models, and c (1024^2, 64x64 lenslets of\n"
                            "16 px, diffraction); --quick: smaller grids.\n",
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
    static const shape full[] = {
        {"a", 1280, 18, 64, 64.0, 16.5, 3},
        {"b", 2560, 50, 80, 48.0, 49.3, 3},
        {"c", 1024, 64, 0, 16.0, 0.0, 2},
    };
    static const shape quick[] = {
        {"a-quick", 640, 9, 32, 64.0, 8.9, 3},
        {"c-quick", 256, 16, 0, 16.0, 0.0, 2},
    };
    const shape *cs = o.quick ? quick : full;
    const int n = o.quick ? 2 : 3;
    rc = 0;
    for (int i = 0; i < n && !rc; i++)
        rc = bench_config(&o, ctx, cpu, &cs[i]);
    sw_bench_finish(&o);
    sw_context_destroy(cpu);
    sw_context_destroy(ctx);
    return rc;
}

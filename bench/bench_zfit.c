/*
 * bench_zfit: the Zernike fit of Shack-Hartmann slopes (zernike_fit.h; seed 001 section 3.3).
 *
 * Configurations: a square grid of N x N lenslets of 16 px with the pupil inscribed, N chosen so
 * that about S lenslets are lit to >= 0.5 (the fit's default min_illum), S in {250, 2000, 10000,
 * 40000}, orders {4, 6, 8, 10} (J - 1 = {14, 27, 44, 65} fitted modes; J = {15, 28, 45, 66}
 * terms), single frames and batches of 32 (BATCH). The slopes are uniformly random floats in
 * [-2, 2) px (the fit's cost does not depend on them), two buffers used in turn. The "config"
 * field is "n<used lenslets> J<terms> B<frames>". --quick: S in {250, 2000}, orders {4, 10}.
 *
 * Cases (the "bench" field), per method:
 *   zfit_<pinv|qr>_cpu     the CPU plan (LAPACK/BLAS), host arrays; host clock
 *   zfit_<pinv|qr>_gpu     the CUDA plan, slopes, coefficients and residuals in device memory
 *                          (the run reads the per-frame invalid-lenslet flags back, so it has
 *                          finished when it returns); host clock
 *   zfit_<pinv|qr>_gpu_host the CUDA plan with host arrays (copies in and out)
 * Throughput in frames/s. The plan's creation (derivative matrix by Green's theorem, SVD / QR)
 * is timed once per configuration and printed on stderr (not a JSON case).
 */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef SW_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define PROG  "bench_zfit"
#define BATCH 32

typedef struct job {
    sw_zfit_plan *plan;
    int frames;
    sw_memory memory;
    const float *slopes[2];
    double *coef, *res;
} job;

static sw_status run_job(void *user, int sample, double *measured_us)
{
    job *j = user;
    (void)measured_us;
    return sw_zfit_run(j->plan, j->slopes[sample & 1], NULL, j->frames, j->memory, j->coef, j->res);
}

static int fail(sw_context *ctx, const char *what, sw_status st)
{
    fprintf(stderr, "%s: %s: %s (%s)\n", PROG, what, sw_context_error(ctx), sw_status_string(st));
    return 1;
}

/* One case: plan on ctx, frames per run, memory of the arrays. */
static int one_case(const sw_bench_options *o, sw_context *ctx, const sw_zfit_params *base,
                    const char *name, int frames, sw_memory memory)
{
    sw_zfit_params p = *base;
    p.max_frames = frames;
    sw_zfit_plan *plan = NULL;
    double t0 = sw_bench_now_us();
    sw_status st = sw_zfit_create(ctx, &p, &plan);
    if (st != SW_OK)
        return fail(ctx, "sw_zfit_create", st);
    double create_us = sw_bench_now_us() - t0;
    int n = sw_zfit_slopes(plan), J = sw_zfit_terms(plan);
    size_t ns = (size_t)frames * 2 * n;
    float *hs = malloc(2 * ns * sizeof(float));
    double *hc = malloc((size_t)frames * J * sizeof(double)), *hr = malloc(frames * sizeof(double));
    if (!hs || !hc || !hr) {
        free(hs), free(hc), free(hr);
        sw_zfit_destroy(plan);
        fprintf(stderr, "%s: out of memory\n", PROG);
        return 1;
    }
    uint64_t seed = 0x5EEDull;
    for (size_t i = 0; i < 2 * ns; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        hs[i] = (float)(4.0 * (double)(seed >> 40) / 16777216.0 - 2.0);
    }
    job j = {plan, frames, memory, {hs, hs + ns}, hc, hr};
#ifdef SW_HAVE_CUDA
    float *ds = NULL;
    double *dc = NULL, *dr = NULL;
    if (memory == SW_MEM_DEVICE) {
        if (cudaMalloc((void **)&ds, 2 * ns * sizeof(float)) != cudaSuccess ||
            cudaMalloc((void **)&dc, (size_t)frames * J * sizeof(double)) != cudaSuccess ||
            cudaMalloc((void **)&dr, frames * sizeof(double)) != cudaSuccess) {
            fprintf(stderr, "%s: cudaMalloc failed\n", PROG);
            cudaFree(ds), cudaFree(dc), cudaFree(dr);
            free(hs), free(hc), free(hr);
            sw_zfit_destroy(plan);
            return 1;
        }
        cudaMemcpy(ds, hs, 2 * ns * sizeof(float), cudaMemcpyHostToDevice);
        j.slopes[0] = ds;
        j.slopes[1] = ds + ns;
        j.coef = dc;
        j.res = dr;
    }
#endif
    char cfg[96];
    snprintf(cfg, sizeof cfg, "n%d J%d B%d", sw_zfit_used(plan), J, frames);
    if (!o->json_only)
        fprintf(stderr, "%s: %s %s: plan created in %.1f ms\n", PROG, name, cfg,
                create_us / 1000.0);
    sw_bench_case c = {name, cfg, ctx, run_job, &j, 0, (double)frames, "frame"};
    st = sw_bench_run(o, &c, NULL);
#ifdef SW_HAVE_CUDA
    if (memory == SW_MEM_DEVICE) {
        cudaFree(ds);
        cudaFree(dc);
        cudaFree(dr);
    }
#endif
    free(hs), free(hc), free(hr);
    sw_zfit_destroy(plan);
    return st == SW_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
    sw_bench_options o;
    int rc = sw_bench_parse_args(
        argc, argv, PROG,
        "Zernike fit: about {250, 2000, 10000, 40000} lit lenslets x orders {4, 6, 8, 10},\n"
        "single frames and batches of 32, PINV and QR (--quick: {250, 2000} x {4, 10}).\n"
        "Cases: zfit_pinv_cpu, zfit_qr_cpu (CPU backend; on CUDA too unless --json-only);\n"
        "zfit_pinv_gpu, zfit_qr_gpu (device arrays), zfit_pinv_gpu_host, zfit_qr_gpu_host "
        "(CUDA).\n",
        &o);
    if (rc != SW_BENCH_CONTINUE)
        return rc;
    sw_context *ctx = NULL, *cpu = NULL; /* ctx: the GPU's (NULL on the CPU backend) */
    if (sw_bench_contexts(&o, PROG, !o.json_only, &ctx, &cpu) != 0)
        return 1;
    const int on_gpu = ctx != NULL;
    static const int s_full[] = {250, 2000, 10000, 40000}, s_quick[] = {250, 2000};
    static const int o_full[] = {4, 6, 8, 10}, o_quick[] = {4, 10};
    const int *ss = o.quick ? s_quick : s_full, *os = o.quick ? o_quick : o_full;
    int nsz = o.quick ? 2 : 4, nord = o.quick ? 2 : 4;
    static const int batches[] = {1, BATCH};
    static const sw_zfit_method methods[] = {SW_ZFIT_PINV, SW_ZFIT_QR};
    rc = 0;
    for (int a = 0; a < nsz && !rc; a++) {
        /* lit lenslets ~ pi N^2 / 4 for the inscribed pupil */
        int N = (int)lround(sqrt(4.0 * ss[a] / 3.14159265358979323846));
        for (int b = 0; b < nord && !rc; b++)
            for (int mth = 0; mth < 2 && !rc; mth++)
                for (int bt = 0; bt < 2 && !rc; bt++) {
                    sw_zfit_params p;
                    sw_zfit_params_default(&p);
                    p.geometry.nx = p.geometry.ny = N;
                    p.pupil_cx_px = p.pupil_cy_px = -0.5 + p.geometry.pitch_px * N / 2.0;
                    p.pupil_radius_px = p.geometry.pitch_px * N / 2.0;
                    p.max_order = os[b];
                    p.method = methods[mth];
                    const char *mname = mth ? "qr" : "pinv";
                    char name[64];
                    if (cpu) {
                        snprintf(name, sizeof name, "zfit_%s_cpu", mname);
                        rc = one_case(&o, cpu, &p, name, batches[bt], SW_MEM_HOST);
                    }
                    if (on_gpu && !rc) {
                        snprintf(name, sizeof name, "zfit_%s_gpu", mname);
                        rc = one_case(&o, ctx, &p, name, batches[bt], SW_MEM_DEVICE);
                        if (!rc) {
                            snprintf(name, sizeof name, "zfit_%s_gpu_host", mname);
                            rc = one_case(&o, ctx, &p, name, batches[bt], SW_MEM_HOST);
                        }
                    }
                }
    }
    sw_bench_finish(&o);
    sw_context_destroy(cpu);
    sw_context_destroy(ctx);
    return rc;
}

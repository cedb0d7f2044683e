/*
 * bench_zmap: wavefront maps from Zernike coefficients (zernike_fit.h, seed 001 section 3.4 and
 * its results section 4.4).
 *
 * Configurations: maps of size^2 pixels, size in {256, 512, 1024, 2048}, radial orders
 * {4, 6, 8, 10} (J = 15, 28, 45, 66 terms), basis maps stored as float or half; "config" is
 * "<float|half> <size> o<order> J<terms>". --quick: sizes {256, 1024}.
 *
 * Cases (the "bench" field), on the context's backend:
 *   zmap_gpu         sw_zmap_run into a device-resident f32 map; kernel time by CUDA events
 *   zmap_gpu_direct  the direct method (sw_zmap_run_direct: the polynomials evaluated on the fly in
 *                    double, no basis maps read); CUDA events; once per size and order
 *   zmap_cpu         sw_zmap_run into a host map, the context's threads
 *   zmap_cpu_direct  the direct method on the CPU; once per size and order
 * Throughput of the map cases: GB/s of basis maps read plus map written (the stored pixels of
 * the J maps, zmap_internal.h, and size^2 floats), i.e. the effective memory bandwidth; of the
 * direct cases: Mpixel/s.
 * Rotation: the coefficients change every call (8 sets). The basis maps are the plan's own and are
 * read by every call: maps smaller than the GPU's L2 (50 MB on an H100: half maps up to ~512^2 at
 * order 10) are served from it, as they would be in a real loop that repeats the call.
 */
#include "harness.h"
/* For the bytes a run reads (the plan's stored basis pixels, plan->npix) and SW_ZMAP_MAX_TERMS. */
#include "../src/zernike/zmap_internal.h"

#include "spotwave/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef SW_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define PROG  "bench_zmap"
#define NSETS 8

typedef struct job {
    sw_context *ctx;
    sw_zmap_plan *plan;
    int direct;
    int events; /* time the call with CUDA events on the context's stream */
    int32_t terms;
    double coef[NSETS][SW_ZMAP_MAX_TERMS];
    sw_image out;
#ifdef SW_HAVE_CUDA
    cudaEvent_t start, stop;
#endif
} job;

static sw_status run_job(void *user, int sample, double *measured_us)
{
    job *j = user;
    const double *c = j->coef[sample % NSETS];
#ifdef SW_HAVE_CUDA
    if (j->events) {
        cudaStream_t s = (cudaStream_t)sw_context_stream(j->ctx);
        if (cudaEventRecord(j->start, s) != cudaSuccess)
            return SW_ECUDA;
        sw_status st = j->direct ? sw_zmap_run_direct(j->plan, c, j->terms, &j->out)
                                 : sw_zmap_run(j->plan, c, j->terms, &j->out);
        if (st != SW_OK)
            return st;
        float ms = 0.0f;
        if (cudaEventRecord(j->stop, s) != cudaSuccess ||
            cudaEventSynchronize(j->stop) != cudaSuccess ||
            cudaEventElapsedTime(&ms, j->start, j->stop) != cudaSuccess)
            return SW_ECUDA;
        *measured_us = 1000.0 * ms;
        return SW_OK;
    }
#endif
    return j->direct ? sw_zmap_run_direct(j->plan, c, j->terms, &j->out)
                     : sw_zmap_run(j->plan, c, j->terms, &j->out);
}

static void fail(sw_context *ctx, const char *what)
{
    fprintf(stderr, "%s: %s: %s\n", PROG, what, sw_context_error(ctx));
}

/* One plan (size, order, half) and its cases; 0 on success. */
static int bench_plan(const sw_bench_options *o, sw_context *ctx, int32_t size, int order, int half)
{
    const int cuda = sw_context_backend(ctx) == SW_BACKEND_CUDA;
    sw_zmap_params p;
    sw_zmap_params_default(&p);
    p.size = size;
    p.max_order = order;
    p.half = half;
    job *j = calloc(1, sizeof *j);
    if (!j) {
        fprintf(stderr, "%s: out of memory\n", PROG);
        return 1;
    }
    int rc = 1;
    j->ctx = ctx;
    j->terms = sw_zernike_count(order);
    for (int s = 0; s < NSETS; s++)
        for (int32_t t = 0; t < j->terms; t++) {
            sw_rng4 r = sw_rng_draw(0x2A9, SW_RNG_STREAM_USER, (uint64_t)(s * 100 + t));
            j->coef[s][t] = (2.0 * r.v[0] / 4294967296.0 - 1.0) * 0.5;
        }
    if (sw_zmap_create(ctx, &p, &j->plan) != SW_OK) {
        fail(ctx, "sw_zmap_create");
        goto done;
    }
    sw_status st = cuda ? sw_image_alloc_device(ctx, size, size, SW_PIX_F32, &j->out)
                        : sw_image_alloc(ctx, size, size, SW_PIX_F32, &j->out);
    if (st != SW_OK) {
        fail(ctx, "sw_image_alloc");
        goto done;
    }
#ifdef SW_HAVE_CUDA
    if (cuda) {
        if (cudaEventCreate(&j->start) != cudaSuccess || cudaEventCreate(&j->stop) != cudaSuccess) {
            fprintf(stderr, "%s: cudaEventCreate failed\n", PROG);
            goto done;
        }
        j->events = 1;
    }
#endif
    char config[96];
    snprintf(config, sizeof config, "%s %d o%d J%d", half ? "half" : "float", (int)size, order,
             (int)j->terms);
    const double bytes = (double)j->terms * (double)j->plan->npix * (half ? 2.0 : 4.0) +
                         4.0 * (double)size * (double)size;
    sw_bench_case c = {cuda ? "zmap_gpu" : "zmap_cpu", config, ctx, run_job, j, bytes, 0, NULL};
    if (sw_bench_run(o, &c, NULL) != SW_OK)
        goto done;
    if (!half) { /* the direct method does not read the basis: once per size and order */
        j->direct = 1;
        snprintf(config, sizeof config, "direct %d o%d J%d", (int)size, order, (int)j->terms);
        sw_bench_case d = {cuda ? "zmap_gpu_direct" : "zmap_cpu_direct",
                           config,
                           ctx,
                           run_job,
                           j,
                           0,
                           (double)size * size / 1e6,
                           "Mpixel"};
        if (sw_bench_run(o, &d, NULL) != SW_OK)
            goto done;
    }
    rc = 0;
done:
#ifdef SW_HAVE_CUDA
    if (j->events) {
        cudaEventDestroy(j->start);
        cudaEventDestroy(j->stop);
    }
#endif
    sw_image_free(&j->out);
    sw_zmap_destroy(j->plan);
    free(j);
    return rc;
}

int main(int argc, char **argv)
{
    sw_bench_options o;
    int rc = sw_bench_parse_args(argc, argv, PROG,
                                 "Wavefront maps: sizes 256..2048, orders 4..10, float and half "
                                 "basis maps, and the direct method.\n",
                                 &o);
    if (rc != SW_BENCH_CONTINUE)
        return rc;
    sw_context *ctx = NULL;
    if (sw_bench_context(&o, PROG, &ctx) != 0)
        return 1;
    const int32_t all_sizes[] = {256, 512, 1024, 2048}, quick_sizes[] = {256, 1024};
    const int32_t *sizes = o.quick ? quick_sizes : all_sizes;
    const int nsizes = o.quick ? 2 : 4;
    const int orders[] = {4, 6, 8, 10};
    rc = 0;
    for (int s = 0; s < nsizes && rc == 0; s++)
        for (int q = 0; q < 4 && rc == 0; q++)
            for (int half = 0; half <= 1 && rc == 0; half++)
                rc = bench_plan(&o, ctx, sizes[s], orders[q], half);
    sw_bench_finish(&o);
    sw_context_destroy(ctx);
    return rc;
}
